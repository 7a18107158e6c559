-- wrk script of bench_http.py: optional pacing, an optional JSON body, one JSON line at the end.
--
--   wrk ... -s _wrk_report.lua URL -- [DELAY_MS [BODY_FILE]]
--
-- With DELAY_MS > 0, each connection waits that long before each request
-- (wrk's delay() hook): a light client at a known, low rate. With BODY_FILE,
-- every request is a POST of that file's bytes as application/json
-- (FastAPI's /score). done() prints the summary and exact latency
-- percentiles (microseconds, from wrk's histogram) on one line that starts
-- with "@@wrk ", for the script to parse.

local delay_ms = 0

function init(args)
   delay_ms = tonumber(args[1] or "0") or 0
   if delay_ms > 0 then
      -- wrk looks for a global delay() after init(), once per thread.
      delay = function() return delay_ms end
   end
   if args[2] then
      -- wrk.init() formats the request after init() returns: it takes these.
      local f = assert(io.open(args[2], "rb"))
      wrk.body = f:read("*a")
      f:close()
      wrk.method = "POST"
      wrk.headers["Content-Type"] = "application/json"
   end
end

done = function(summary, latency, requests)
   local e = summary.errors
   local p = {}
   for _, q in ipairs({ 50, 90, 99, 99.9 }) do
      p[#p + 1] = string.format('"%g":%d', q, latency:percentile(q))
   end
   io.write(string.format(
      '@@wrk {"requests":%d,"bytes":%d,"duration_us":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"min":%d,"max":%d,"mean":%.1f,"stdev":%.1f,"percentiles":{%s}}}\n',
      summary.requests, summary.bytes, summary.duration,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.min, latency.max, latency.mean, latency.stdev, table.concat(p, ",")))
end
