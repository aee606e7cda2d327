// The status page in a real browser (issue 17): headless Chromium loads "/"
// of a running dispatcher with a worker and closures, runs its JavaScript
// (which fetches /api/status), and the test checks what it rendered: the
// worker listed, the closures counted (and called stuck by the watchdog),
// every plot drawn. A screenshot is kept
// in the build tree (artifacts/status_page.png). Skipped, saying so, when no
// Chromium is installed (Debian package `chromium`).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/closures/closure_test_support.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace dispatch::testing {
namespace {

using namespace std::chrono_literals;

std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::string command = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (system(command.c_str()) == 0) return name;
  }
  return "";
}

// Runs headless Chromium with `args` on `url`; returns its stdout.
std::string RunChromium(const std::string& chromium, const TempDir& profile, const std::string& args,
                        const std::string& url) {
  // Virtual time runs the page's timers (its 2 s refresh) without waiting
  // for them in real time; fetches pause it until they are answered.
  Subprocess browser({"/bin/sh", "-c",
                      "exec " + chromium + " --headless --no-sandbox --disable-gpu --hide-scrollbars "
                      "--user-data-dir=" + profile.path() + " --virtual-time-budget=5000 " + args +
                      " '" + url + "' 2>/dev/null"});
  std::string out;
  while (auto line = browser.ReadLine(120s)) out += *line + "\n";
  browser.Wait(30s);
  return out;
}

TEST(StatusPage, HeadlessChromiumRendersWorkersClosuresAndPlots) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "no Chromium installed (Debian package `chromium`): the status page was NOT "
                    "rendered in a browser";
  }
  // The two running closures never finish: after a second the watchdog
  // calls them stuck, and the page says so.
  ClosureDispatcher dispatcher({"--stuck-closure-warning-ms=1000"});
  auto worker = StartClosureWorker(dispatcher.address(), 2);
  auto coordinator = MakeCoordinator(dispatcher.address());
  // Two run on the worker's two slots for the rest of the test, three wait.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(coordinator->Schedule("sleep", "600000").ok());
  const std::string url = dispatcher.process().http_url();
  // The plots need the history's first samples (one a second).
  ASSERT_TRUE(WaitUntil([&] {
    HttpResponse status = HttpGet(url, "/api/status");
    return status.status == 200 && status.body.find("\"unixSeconds\":[") != std::string::npos &&
           status.body.find("\"unixSeconds\":[]") == std::string::npos &&
           status.body.find("\"closures\":{\"waiting\":0,\"queued\":3,\"assigned\":2,") != std::string::npos &&
           status.body.find("\"closuresStuck\":2") != std::string::npos;
  }));

  TempDir profile;
  const std::string dom = RunChromium(chromium, profile, "--dump-dom", url);
  ASSERT_NE(dom.find("data-rendered=\""), std::string::npos) << "the page never rendered /api/status:\n" << dom;
  // The worker, in the workers table: two closure slots, two running.
  EXPECT_TRUE(std::regex_search(dom, std::regex("<tr><td>[0-9]+</td><td>" + worker->address() +
                                                "</td><td>yes</td><td>[^<]*</td><td>0</td><td>2</td><td>2</td>")))
      << dom;
  // The closures, in the summary and in their coordinator's row.
  EXPECT_NE(dom.find("0 waiting, 3 queued, 2 assigned, 0 finished"), std::string::npos) << dom;
  EXPECT_TRUE(std::regex_search(dom, std::regex("<tr><td>[0-9]+</td><td>0</td><td>3</td><td>2</td><td>0</td>"
                                                "<td>0</td><td>0</td></tr>")))
      << dom;
  // The stuck closures, in red beside the counts.
  EXPECT_NE(dom.find("2 stuck: running, none finished"), std::string::npos) << dom;
  // Every plot drawn, with at least one point.
  for (const char* plot : {"plot-closures", "plot-commit", "plot-heartbeats", "plot-lag"}) {
    EXPECT_TRUE(std::regex_search(dom, std::regex(std::string("id=\"") + plot + "\"[^>]*data-points=\"[1-9]")))
        << plot << " not drawn:\n" << dom;
  }

  // The screenshot, kept with the build as an artifact of the run.
  mkdir(DISPATCH_ARTIFACTS_DIR, 0755);
  const std::string png = std::string(DISPATCH_ARTIFACTS_DIR) + "/status_page.png";
  unlink(png.c_str());
  RunChromium(chromium, profile, "--window-size=1280,1100 --screenshot=" + png, url);
  struct stat st;
  ASSERT_EQ(stat(png.c_str(), &st), 0) << "no screenshot at " << png;
  EXPECT_GT(st.st_size, 1000);
  RecordProperty("screenshot", png);
  printf("status page screenshot: %s\n", png.c_str());
}

}  // namespace
}  // namespace dispatch::testing
