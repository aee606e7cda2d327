// The status page served at "/": one self-contained HTML document (inline CSS
// and JavaScript, no external assets) that polls /api/status every two seconds
// and renders it: version, incarnation, uptime; workers; jobs and their tasks;
// closures by state per coordinator; plots of the recent history. It holds no
// data itself. With a token, the page takes it from its URL fragment
// (/#token=TOKEN, which browsers never send to the server) or asks for it,
// and sends it as a bearer token to /api/status.
#pragma once

namespace dispatch::reactor {

const char* StatusPageHtml();

}  // namespace dispatch::reactor
