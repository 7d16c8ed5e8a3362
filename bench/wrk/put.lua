-- wrk script: 1 KiB PUTs with an X-Fencing-Token over /bkt/obj-1 .. /bkt/obj-N.
--
--   wrk ... -s put.lua URL -- MODE BASE THREADS [RESOURCES [DEPTH]]
--
-- DEPTH (default 2) is the number of path segments: 2 is /bkt/obj-i; 3 or
-- more is /bkt/p<i>/d/.../obj-i, which the prefix fence bkt/p<i>/ covers.
--
-- MODE same:   every request carries token BASE (the holder writing again).
-- MODE rising: every request carries a token above every earlier one on its
--              resource (a takeover, so a durable raise): thread k of THREADS
--              writes only the resources i with i % THREADS == k, round-robin,
--              with tokens BASE, BASE+1, ... from its own counter. A resource
--              comes back only after RESOURCES/THREADS - 1 other requests of its
--              thread, long after its previous write has finished.
-- done() prints one machine-readable "BENCH k=v ..." line; latencies in us.

local body = string.rep("x", 1024)
local nextid = 0

function setup(thread)
  thread:set("id", nextid)
  nextid = nextid + 1
end

function init(args)
  mode = args[1] or "same"
  base = tonumber(args[2] or "1")
  nthreads = tonumber(args[3] or "1")
  nres = tonumber(args[4] or "1000")
  depth = tonumber(args[5] or "2")
  local host = wrk.headers["Host"]
  heads, tails, reqs = {}, {}, {}
  for i = id, nres - 1, nthreads do
    local path = "/bkt/obj-" .. i
    if depth >= 3 then
      path = "/bkt/p" .. i .. "/" .. string.rep("d/", depth - 3) .. "obj-" .. i
    end
    local head = "PUT " .. path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nContent-Length: 1024\r\nX-Fencing-Token: "
    local tail = "\r\n\r\n" .. body
    heads[#heads + 1] = head
    tails[#tails + 1] = tail
    reqs[#reqs + 1] = head .. tostring(base) .. tail
  end
  n = #heads
  i = 0
  counter = base
end

function request()
  i = i + 1
  if i > n then i = 1 end
  if mode == "rising" then
    counter = counter + 1
    return heads[i] .. tostring(counter) .. tails[i]
  end
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d non2xx=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
