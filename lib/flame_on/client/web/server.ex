defmodule FlameOn.Client.Web.Server do
  @moduledoc false
  # One web UI: the listening socket, an acceptor, a process per
  # connection (at most :max_connections at once; see handle_call
  # :connection for who gives way past it), and the
  # captures started from its form (at most :max_captures waiting at once;
  # the last @kept_captures finished ones are remembered for their pages;
  # FlameOn.Client.Web.Captures asks for them). Runs under
  # FlameOn.Client.Web.Supervisor; see FlameOn.Client.Web.

  use GenServer, restart: :temporary

  require Logger

  alias FlameOn.Client.NextCall
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web.HTTP
  alias FlameOn.Client.Web.Router

  @kept_captures 50

  @doc false
  def start_link(config), do: GenServer.start_link(__MODULE__, config)

  @doc "This server's configuration (what the router needs)."
  @spec config(pid()) :: map()
  def config(server), do: GenServer.call(server, :config)

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(config) do
    Process.flag(:trap_exit, true)

    listen_opts =
      HTTP.socket_options() ++
        [ip: config.ip, reuseaddr: true, backlog: 128] ++
        if(tuple_size(config.ip) == 8, do: [:inet6], else: [])

    case :gen_tcp.listen(config.port, listen_opts) do
      {:ok, listen} ->
        {:ok, port} = :inet.port(listen)
        config = %{config | port: port, url: url(config.ip, port)}
        server = self()
        acceptor = spawn_link(fn -> accept_loop(listen, server) end)

        {:ok,
         %{
           config: Map.put(config, :server, server),
           listen: listen,
           acceptor: acceptor,
           connections: %{},
           captures: %{},
           finished: []
         }}

      {:error, reason} ->
        {:stop, {:listen, reason}}
    end
  end

  @impl GenServer
  def handle_call(:config, _from, state), do: {:reply, state.config, state}

  # The acceptor asks before it hands a connection over: a process per
  # connection, watched here so the count stays right however it ends.
  # When all are taken, the one that has been sending its request the
  # longest gives way (it is closed): connections that hold a partial
  # request (slow or idle clients, on purpose or not) cannot keep a client
  # that sends its request at once from being served. Only when every
  # connection is past its request (being answered) is the new one
  # refused, with a 503.
  def handle_call(:connection, _from, state) do
    state =
      if map_size(state.connections) >= state.config.max_connections,
        do: evict_oldest_reading(state),
        else: state

    if map_size(state.connections) >= state.config.max_connections do
      {:reply, :busy, state}
    else
      config = state.config

      {pid, ref} =
        spawn_monitor(fn ->
          receive do
            {:socket, socket} -> handle(socket, config)
          after
            5_000 -> :ok
          end
        end)

      connection = %{pid: pid, reading: true, since: System.monotonic_time()}
      {:reply, {:ok, pid}, %{state | connections: Map.put(state.connections, ref, connection)}}
    end
  end

  def handle_call({:start_capture, mfa, opts}, _from, state) do
    waiting = Enum.count(state.captures, fn {_, c} -> c.status == :waiting end)

    cond do
      waiting >= state.config.max_captures ->
        {:reply, {:error, :too_many_captures}, state}

      (other = waiting_on(state, mfa)) != nil ->
        {:reply, {:error, {:already_waiting, other}}, state}

      true ->
        id = random_id()
        server = self()

        {runner, _ref} =
          spawn_monitor(fn ->
            result =
              try do
                summarize(NextCall.capture(mfa, opts))
              rescue
                # e.g. call patterns refused: another tool call-traces
                error -> {:error, {:refused, Exception.message(error)}}
              end

            send(server, {:capture_done, id, self(), result})
          end)

        capture = %{
          id: id,
          mfa: mfa,
          opts: opts,
          runner: runner,
          status: :waiting,
          started_at: System.system_time(:millisecond),
          timeout_ms: Keyword.fetch!(opts, :timeout)
        }

        {:reply, {:ok, id}, %{state | captures: Map.put(state.captures, id, capture)}}
    end
  end

  def handle_call({:capture, id}, _from, state) do
    {:reply, Map.fetch(state.captures, id), state}
  end

  def handle_call(:waiting, _from, state) do
    waiting =
      state.captures
      |> Map.values()
      |> Enum.filter(&(&1.status == :waiting))
      |> Enum.sort_by(& &1.started_at)

    {:reply, waiting, state}
  end

  def handle_call({:cancel, id}, _from, state) do
    case state.captures do
      %{^id => %{status: :waiting, runner: runner}} ->
        Process.exit(runner, :kill)
        {:reply, :ok, finish(state, id, {:error, :cancelled})}

      _ ->
        {:reply, :error, state}
    end
  end

  # a connection has read its request: it is being answered
  @impl GenServer
  def handle_cast({:request_read, pid}, state) do
    connections =
      Map.new(state.connections, fn
        {ref, %{pid: ^pid} = c} -> {ref, %{c | reading: false}}
        other -> other
      end)

    {:noreply, %{state | connections: connections}}
  end

  @impl GenServer
  def handle_info({:capture_done, id, _runner, result}, state) do
    {:noreply, finish(state, id, result)}
  end

  def handle_info({:DOWN, ref, :process, pid, reason}, state) do
    case Map.pop(state.connections, ref) do
      {%{pid: ^pid}, connections} ->
        {:noreply, %{state | connections: connections}}

      {nil, _} ->
        case Enum.find(state.captures, fn {_, c} -> c.runner == pid and c.status == :waiting end) do
          {id, _} when reason != :normal ->
            {:noreply, finish(state, id, {:error, {:crashed, reason}})}

          _ ->
            {:noreply, state}
        end
    end
  end

  def handle_info({:EXIT, pid, reason}, %{acceptor: pid} = state) do
    {:stop, {:acceptor, reason}, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, state) do
    :gen_tcp.close(state.listen)

    for {_, %{status: :waiting, runner: runner}} <- state.captures,
        do: Process.exit(runner, :kill)

    :ok
  end

  defp evict_oldest_reading(state) do
    reading = for {ref, %{reading: true} = c} <- state.connections, do: {ref, c}

    case reading do
      [] ->
        state

      _ ->
        {ref, %{pid: pid}} = Enum.min_by(reading, fn {_, c} -> c.since end)
        Process.demonitor(ref, [:flush])
        # its socket closes with it
        Process.exit(pid, :kill)
        %{state | connections: Map.delete(state.connections, ref)}
    end
  end

  # Who waits for mfa already: one of our captures (its runner may not
  # have set its pattern yet), or any capture on the node.
  defp waiting_on(state, mfa) do
    Enum.find_value(state.captures, fn {_, c} ->
      c.status == :waiting and c.mfa == mfa and c.runner
    end) ||
      case List.keyfind(FlameOn.Client.Node.Gates.waiting(), mfa, 0) do
        {_, pid} -> pid
        nil -> nil
      end
  end

  # A finished capture keeps its result for its page; only the last few.
  defp finish(state, id, result) do
    case state.captures do
      %{^id => %{status: :waiting} = capture} ->
        captures = Map.put(state.captures, id, %{capture | status: result})
        finished = [id | state.finished]
        {keep, drop} = Enum.split(finished, @kept_captures)
        %{state | captures: Map.drop(captures, drop), finished: keep}

      _ ->
        state
    end
  end

  # What the capture's page needs: the trace's id in the store, not the
  # profile (the store holds it).
  defp summarize({:ok, profile}) do
    case TraceStore.get(profile.trace_id) do
      {:ok, _} -> {:ok, profile.trace_id}
      :error -> {:error, :not_stored}
    end
  end

  defp summarize({:error, reason}), do: {:error, reason}

  defp random_id, do: Base.url_encode64(:crypto.strong_rand_bytes(12), padding: false)

  defp url({0, 0, 0, 0}, port), do: "http://#{hostname()}:#{port}/"
  defp url({0, 0, 0, 0, 0, 0, 0, 0}, port), do: "http://#{hostname()}:#{port}/"
  defp url({_, _, _, _, _, _, _, _} = ip, port), do: "http://[#{:inet.ntoa(ip)}]:#{port}/"
  defp url(ip, port), do: "http://#{:inet.ntoa(ip)}:#{port}/"

  defp hostname do
    {:ok, name} = :inet.gethostname()
    to_string(name)
  end

  # --- connections --------------------------------------------------------------

  defp accept_loop(listen, server) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        serve(socket, server)
        accept_loop(listen, server)

      {:error, :closed} ->
        :ok

      {:error, reason} ->
        Logger.warning("FlameOn web UI: accept failed: #{inspect(reason)}")
        Process.sleep(100)
        accept_loop(listen, server)
    end
  end

  defp serve(socket, server) do
    case GenServer.call(server, :connection) do
      {:ok, handler} ->
        case :gen_tcp.controlling_process(socket, handler) do
          :ok -> send(handler, {:socket, socket})
          {:error, _} -> :gen_tcp.close(socket)
        end

      :busy ->
        # answered by a process of its own: it reads and drops the
        # request for a moment (HTTP.send_refusal/2), the acceptor does not
        refusal =
          spawn(fn ->
            receive do
              {:socket, s} -> refuse(s, 503, "too many connections, try again")
            after
              5_000 -> :ok
            end
          end)

        case :gen_tcp.controlling_process(socket, refusal) do
          :ok -> send(refusal, {:socket, socket})
          {:error, _} -> :gen_tcp.close(socket)
        end
    end
  end

  defp refuse(socket, status, message),
    do: HTTP.send_refusal(socket, Router.error(status, message))

  defp handle(socket, config) do
    case HTTP.read(socket) do
      {:ok, request} ->
        GenServer.cast(config.server, {:request_read, self()})
        HTTP.send_response(socket, Router.handle(request, config))

      {:error, :closed} ->
        :gen_tcp.close(socket)

      {:error, {status, message}} ->
        refuse(socket, status, message)
    end
  catch
    kind, reason ->
      Logger.error("FlameOn web UI: " <> Exception.format(kind, reason, __STACKTRACE__))
      HTTP.send_response(socket, Router.error(500, "internal error (see the node's log)"))
  end
end
