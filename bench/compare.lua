-- wrk script for bench/compare.py: A2A HTTP+JSON requests, status classes counted.
--
-- Arguments (after `--`): mode path immediate token delay_ms prefix [rate]
--   mode       "send" (POST message:send, a unique messageId per request) or "get"
--   path       request path (message:send, /tasks/<id>, /tasks?pageSize=50)
--   immediate  "1": configuration.returnImmediately (non-blocking send)
--   token      bearer token ("-" for none)
--   delay_ms   pause before each request of a connection (0: none), to offer a rate
--   prefix     messageId prefix, unique per run
--   rate       requests/s offered by each wrk thread on a fixed schedule (open loop):
--              the thread's n-th request is due at start + n/rate whatever the
--              server's latency, sent on whichever of its connections is free
--              (delay_ms is then ignored). A send found due more than 10 ms ago is
--              counted "late": too few connections for that latency; the report
--              says so. 0 or absent: closed loop (delay_ms).
-- done() prints one line "WRKJSON {...}" with 2xx, 503 and other counts and latency.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } compare_timespec;
int clock_gettime(int clock_id, compare_timespec *tp);
]]
local timespec = ffi.new("compare_timespec")

local function now_ms()
   ffi.C.clock_gettime(1, timespec) -- CLOCK_MONOTONIC
   return tonumber(timespec.tv_sec) * 1000 + tonumber(timespec.tv_nsec) / 1e6
end

local threads = {}

function setup(thread)
   thread:set("tid", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   mode = args[1]
   path = args[2]
   immediate = args[3] == "1"
   local token = args[4]
   local delay_ms = tonumber(args[5]) or 0
   prefix = args[6] .. "-" .. tid .. "-"
   ok, refused, other, counter, late = 0, 0, 0, 0, 0
   headers = { ["A2A-Version"] = "1.0", ["Content-Type"] = "application/json" }
   if token ~= "-" then
      headers["Authorization"] = "Bearer " .. token
   end
   config = ""
   if immediate then
      config = ',"configuration":{"returnImmediately":true}'
   end
   if mode == "get" then
      fixed = wrk.format("GET", path, headers)
   end
   local rate = tonumber(args[7]) or 0
   if rate > 0 then
      local interval, due = 1000 / rate, nil
      delay = function()
         local now = now_ms()
         due = (due or now) + interval
         if now - due > 10 then
            late = late + 1
         end
         return math.max(0, math.floor(due - now + 0.5))
      end
   elseif delay_ms > 0 then
      delay = function() return delay_ms end
   end
end

function request()
   if fixed then
      return fixed
   end
   counter = counter + 1
   local body = '{"message":{"messageId":"' .. prefix .. counter
      .. '","role":"ROLE_USER","parts":[{"text":"hello"}]}' .. config .. '}'
   return wrk.format("POST", path, headers, body)
end

function response(status, hdrs, body)
   if status >= 200 and status < 300 then
      ok = ok + 1
   elseif status == 503 then
      refused = refused + 1
   else
      other = other + 1
   end
end

function done(summary, latency, requests)
   local o, r, x, l = 0, 0, 0, 0
   for _, t in ipairs(threads) do
      o = o + t:get("ok")
      r = r + t:get("refused")
      x = x + t:get("other")
      l = l + t:get("late")
   end
   local e = summary.errors
   io.write(string.format(
      'WRKJSON {"responses":%d,"duration_us":%d,"ok":%d,"refused":%d,"other":%d,"late":%d,'
      .. '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"timeouts":%d,'
      .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
      summary.requests, summary.duration, o, r, x, l, e.connect, e.read, e.write, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
