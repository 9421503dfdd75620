defmodule FlameOn.Client.FoldedTest do
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Profile

  setup do
    assert_node_clean()
    :ok
  end

  test "folded lines of a real profile: name;<pid>;frames N" do
    {_, profile} = FlameOn.Client.profile(fn -> Workloads.mixed(20) end, name: "folded_test")
    text = profile |> Profile.folded() |> IO.iodata_to_binary()
    lines = String.split(text, "\n", trim: true)
    prefix = "folded_test;" <> List.to_string(:erlang.pid_to_list(self()))

    assert String.ends_with?(text, "\n")
    assert length(lines) == length(profile.stacks[self()])

    for line <- lines do
      assert line =~ ~r/^[^ ]+ \d+$/, line
      assert String.starts_with?(line, prefix), line
    end

    sum =
      lines
      |> Enum.map(&(&1 |> String.split(" ") |> List.last() |> String.to_integer()))
      |> Enum.sum()

    assert sum == Profile.total_us(profile, self())
    assert Enum.any?(lines, &String.contains?(&1, ";FlameOn.Client.Test.Workloads.fib/1;"))
    assert Enum.any?(lines, &String.contains?(&1, "Process.sleep/1;SLEEP "))
    assert_node_clean()
  end

  test "a process on another node: its pid as its node prints it, then @node; files apart" do
    local = :c.pid(0, 42, 0)
    remote = FlameOn.Client.Test.ExportHelpers.remote_pid(:"b@127.0.0.1", 42)

    profile = %Profile{
      name: "t",
      pid: local,
      stacks: %{local => [{"f", 1}], remote => [{"g", 2}]}
    }

    lines = profile |> Profile.folded() |> IO.iodata_to_binary() |> String.split("\n", trim: true)
    assert Enum.sort(lines) == ["t;<0.42.0>;f 1", "t;<0.42.0>@b@127.0.0.1;g 2"]

    assert Profile.pid_text(remote) == "<0.42.0>@b@127.0.0.1"

    tmp = Path.join(System.tmp_dir!(), "fo_folded_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(tmp) end)

    paths = FlameOn.Client.Export.write(profile, tmp, [:folded], per_process: true)
    names = paths |> Enum.map(fn {:folded, path} -> Path.basename(path) end) |> Enum.sort()
    assert names == ["t.0.42.0.folded", "t.0.42.0@b@127.0.0.1.folded"]
  end

  describe "build/4 from the NIF's tree" do
    setup do
      {:ok, pid: :c.pid(0, 4242, 0)}
    end

    test "names frames, reverses to root first, converts ns to µs", %{pid: pid} do
      raw = %{
        pid => [
          {[], 2_000},
          {[{:lists, :reverse, 1}, {MyApp.Mod, :run, 2}], 1_500_000},
          {[:sleep, {MyApp.Mod, :run, 2}], 3_000},
          {[:gc_minor, :waiting, :node_cap, :depth_cap, {MyApp.Mod, :run, 2}], 7_000}
        ]
      }

      profile = Profile.build(raw_tree(raw), %{events: 1}, name: "t", trace_id: 1)

      assert profile.stacks == %{
               pid => [
                 {"", 2},
                 {"MyApp.Mod.run/2;SLEEP", 3},
                 {"MyApp.Mod.run/2;lists:reverse/1", 1500},
                 {"MyApp.Mod.run/2;…;[truncated];WAITING;GC_MINOR", 7}
               ]
             }

      assert profile.stats == %{events: 1, stacks_without_text: 0}
      assert profile.name == "t"
      assert Profile.total_us(profile, pid) == 1512
      assert Profile.total_us(profile, self()) == 0

      assert IO.iodata_to_binary(Profile.folded(profile)) ==
               """
               t;<0.4242.0> 2
               t;<0.4242.0>;MyApp.Mod.run/2;SLEEP 3
               t;<0.4242.0>;MyApp.Mod.run/2;lists:reverse/1 1500
               t;<0.4242.0>;MyApp.Mod.run/2;…;[truncated];WAITING;GC_MINOR 7
               """
    end

    test "drops 0 µs stacks and processes left empty, rounds to the nearest µs", %{pid: pid} do
      other = :c.pid(0, 4243, 0)

      raw = %{
        pid => [{[{:a, :f, 0}], 499}, {[{:b, :f, 0}], 500}, {[{:c, :f, 0}], 1_499}],
        other => [{[{:a, :f, 0}], 10}, {[], 0}]
      }

      profile = Profile.build(raw_tree(raw), %{}, [])
      assert profile.stacks == %{pid => [{"b:f/0", 1}, {"c:f/0", 1}]}
    end

    test "replaces ; and whitespace in names and merges stacks that become equal", %{pid: pid} do
      raw = %{
        pid => [
          {[{:"a;b", :"f\ng", 1}], 1_000},
          {[{:a_b, :f_g, 1}], 2_000},
          {[{:m, :"-test some thing/1-fun-0-", 0}], 3_000}
        ]
      }

      profile = Profile.build(raw_tree(raw), %{}, name: "my name;x")

      assert profile.stacks == %{pid => [{"a_b:f_g/1", 3}, {"m:-test_some_thing/1-fun-0-/0", 3}]}

      for line <-
            profile |> Profile.folded() |> IO.iodata_to_binary() |> String.split("\n", trim: true) do
        assert line =~ ~r/^[^ ]+ \d+$/
        assert String.starts_with?(line, "my_name_x;<0.4242.0>;")
      end
    end

    test "frame names" do
      assert Profile.frame_name({FlameOn.Client.Test.Workloads, :fib, 1}) ==
               "FlameOn.Client.Test.Workloads.fib/1"

      assert Profile.frame_name({:gen_server, :call, 3}) == "gen_server:call/3"
      assert Profile.frame_name({Kernel, :fun?, 0}) == "Kernel.fun?/0"
      assert Profile.frame_name(:sleep) == "SLEEP"
      assert Profile.frame_name(:depth_cap) == "…"
      assert Profile.frame_name(:node_cap) == "[truncated]"
      assert Profile.frame_name(:waiting) == "WAITING"
      assert Profile.frame_name(:gc_minor) == "GC_MINOR"
      assert Profile.frame_name(:gc_major) == "GC_MAJOR"
    end
  end
end
