-- wrk script: replays SigV4-signed 1 KiB PUTs for the S3 gateway mode.
--
--   wrk ... -s put-signed.lua URL -- FILE THREADS
--
-- FILE holds raw requests separated by NUL bytes (bench/load sign: one per
-- resource, all with the same token and signing time, valid for the
-- gateway's 15-minute clock skew). Thread k of THREADS sends the requests i
-- with i % THREADS == k, round-robin. done() prints the "BENCH k=v ..." line
-- of put.lua.

local nextid = 0

function setup(thread)
  thread:set("id", nextid)
  nextid = nextid + 1
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  local nthreads = tonumber(args[2] or "1")
  reqs = {}
  local k = 0
  for r in string.gmatch(data, "([^%z]+)%z") do
    if k % nthreads == id then
      reqs[#reqs + 1] = r
    end
    k = k + 1
  end
  n = #reqs
  i = 0
end

function request()
  i = i + 1
  if i > n then i = 1 end
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d non2xx=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
