defmodule FlameOn.Client.JSONTest do
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers, only: [json_decode!: 1, nasty_frames: 0]

  alias FlameOn.Client.Export.JSON

  doctest FlameOn.Client.Export.JSON

  defp encode(term), do: term |> JSON.encode!() |> IO.iodata_to_binary()

  describe "scalars and containers" do
    test "literals, numbers, atoms" do
      assert encode(nil) == "null"
      assert encode(true) == "true"
      assert encode(false) == "false"
      assert encode(:ok) == ~S("ok")
      assert encode(0) == "0"
      assert encode(-42) == "-42"
      assert encode(123_456_789_012_345_678_901) == "123456789012345678901"
      assert encode(1.5) == "1.5"
      assert encode(-0.25) == "-0.25"
      assert encode(0.1) == "0.1"
    end

    test "floats come out in a form JSON accepts and read back exactly" do
      for f <- [1.0e20, 1.0e-7, 123.456, -5.0e300, 2.2250738585072014e-308] do
        text = encode(f)
        assert text =~ ~r/\A-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?\z/, text
        assert json_decode!(text) == f
      end
    end

    test "lists and maps, nested, empty" do
      assert encode([]) == "[]"
      assert encode(%{}) == "{}"
      assert encode([1, [2, []], %{}]) == "[1,[2,[]],{}]"

      assert encode(%{"b" => [1], a: %{c: nil}}) |> json_decode!() == %{
               "a" => %{"c" => nil},
               "b" => [1]
             }
    end

    test "returns iodata" do
      assert is_list(JSON.encode!([1, "two"])) or is_binary(JSON.encode!([1, "two"]))
    end
  end

  describe "string escaping (RFC 8259)" do
    test "quotes and backslashes" do
      assert encode(~S(say "hi")) == ~S("say \"hi\"")
      assert encode(~S(a\b)) == ~S("a\\b")
      assert encode(~S(\")) == ~S("\\\"")
    end

    test "control characters use the short escapes or \\u00XX" do
      assert encode("\n\r\t\b\f") == ~S("\n\r\t\b\f")
      assert encode(<<0>>) == ~S("\u0000")
      assert encode(<<1, 0x1F>>) == ~S("\u0001\u001F")

      for byte <- 0..0x1F do
        text = encode(<<byte>>)
        assert text =~ ~r/\A"\\/, "byte #{byte} not escaped: #{inspect(text)}"
        assert json_decode!(text) == <<byte>>
      end
    end

    test "everything else passes through, non-ASCII as UTF-8" do
      assert encode("a/b") == ~S("a/b")
      assert encode(<<0x7F>>) == <<?", 0x7F, ?">>
      assert encode("…") == ~s("…")
      assert encode("Ünïcødé 🔥") == ~s("Ünïcødé 🔥")
      assert byte_size(encode("…")) == 2 + 3
    end

    test "frame names round-trip" do
      for name <- nasty_frames() do
        assert name |> encode() |> json_decode!() == name
        assert %{name => [name]} |> encode() |> json_decode!() == %{name => [name]}
      end
    end

    test "all single characters of the BMP edges and beyond round-trip" do
      for cp <-
            Enum.concat([
              0..0x7F,
              0x80..0x7FF//97,
              0x800..0xD7FF//1013,
              0xE000..0xFFFF//257,
              [0x10000, 0x10FFFF]
            ]) do
        s = <<cp::utf8>>
        assert s |> encode() |> json_decode!() == s
      end
    end

    test "random strings round-trip" do
      :rand.seed(:exsss, {1, 2, 3})
      alphabet = [?", ?\\, ?\n, 0, 0x1F, ?a, ?;, 0xE9, 0x2026, 0x1F525, 0x2028]

      for _ <- 1..300 do
        s = for _ <- 1..:rand.uniform(20), into: "", do: <<Enum.random(alphabet)::utf8>>
        assert s |> encode() |> json_decode!() == s
      end
    end
  end

  describe "errors" do
    test "invalid UTF-8 raises ArgumentError" do
      for bad <- [<<0xFF>>, <<?a, 0xC3>>, <<0xED, 0xA0, 0x80>>, <<"ok", 0x80, "ok">>] do
        assert_raise ArgumentError, ~r/invalid UTF-8/, fn -> JSON.encode!(bad) end
        assert_raise ArgumentError, fn -> JSON.encode!(%{bad => 1}) end
        assert_raise ArgumentError, fn -> JSON.encode!([1, %{"k" => bad}]) end
      end
    end

    test "terms without a JSON form raise ArgumentError" do
      for term <- [{1, 2}, self(), make_ref(), fn -> :ok end, <<1::3>>, [1 | 2], %URI{}] do
        assert_raise ArgumentError, fn -> JSON.encode!(term) end
      end
    end

    test "keys must be atoms or strings, and distinct" do
      assert_raise ArgumentError, ~r/keys must be atoms or strings/, fn ->
        JSON.encode!(%{1 => 2})
      end

      assert_raise ArgumentError, ~r/keys must be atoms or strings/, fn ->
        JSON.encode!(%{nil => 2})
      end

      assert_raise ArgumentError, ~r/duplicate/, fn -> JSON.encode!(%{:a => 1, "a" => 2}) end
    end
  end

  describe "the test decoder" do
    # The checks above lean on json_decode!/1; make sure it is strict.
    test "rejects what is not JSON" do
      for bad <- [
            ~S({"a":1,}),
            ~S([1,]),
            "\"a\nb\"",
            ~S({"a":1,"a":2}),
            "01",
            "[1] x",
            ~S("\x"),
            "'a'"
          ] do
        assert_raise_any(fn -> json_decode!(bad) end, bad)
      end
    end

    test "reads surrogate pairs and whitespace" do
      assert json_decode!(~S( [ "\ud83d\udd25" , 1.5e2 , -0 ] )) == ["🔥", 150.0, 0]
    end

    defp assert_raise_any(fun, input) do
      fun.()
      flunk("accepted #{inspect(input)}")
    rescue
      e in [ArgumentError, MatchError, CaseClauseError, FunctionClauseError] -> e
    end
  end
end
