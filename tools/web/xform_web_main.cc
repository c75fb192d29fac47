// Copyright 2026 The xform Authors.
//
// xform-web: a live 3D view of xformd's worlds in a browser. Serves the
// page and a WebSocket per tab, each fed by a Mirror of its own (see
// gateway.h). Stops on SIGINT or SIGTERM.

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/client_flags.h"
#include "tools/web/gateway.h"
#include "xform/client.h"
#include "xform/internal/release_mutexes.h"

ABSL_FLAG(
    std::string, server, "127.0.0.1:50051",
    "xformd's address, or a cluster's nodes' addresses (comma-separated)");
ABSL_FLAG(std::string, listen, "127.0.0.1:8080",
          "HOST:PORT to serve the page and WebSockets on (port 0: any)");
ABSL_FLAG(std::vector<std::string>, allowed_hosts, {},
          "Names the page may be reached by, besides localhost and IP "
          "addresses (comma-separated; xform-web.example,viewer): a request "
          "giving another as its Host gets 403, so that a site whose name "
          "is re-pointed at this machine cannot read worlds through it");
ABSL_FLAG(std::string, web_root, XFORM_WEB_ROOT,
          "The built page: a directory with index.html and app.js");
ABSL_FLAG(int, threads, 2, "Threads serving HTTP and the tabs (1 to 64)");
ABSL_FLAG(int, max_tabs, 64,
          "Open WebSockets at most (1 to 100000); past it, 503");
ABSL_FLAG(int, max_inbound_bytes, 4096,
          "The largest message a tab may send (16 to 1048576); larger closes "
          "it (1009)");
ABSL_FLAG(std::string, foxglove_listen, "127.0.0.1:8765",
          "HOST:PORT of the Foxglove WebSocket endpoint "
          "(foxglove.websocket.v1; port 0: any; empty: none)");
ABSL_FLAG(std::vector<std::string>, foxglove_allowed_origins,
          {"https://app.foxglove.dev"},
          "Browser Origins, besides this host's, that may open the Foxglove "
          "endpoint (comma-separated; * for any). Clients that are not "
          "browsers send none and are let in");
ABSL_FLAG(int, foxglove_max_clients, 16,
          "Foxglove clients at once (1 to 10000); past it, 503");
ABSL_FLAG(int, foxglove_max_worlds, 8,
          "Worlds one Foxglove client may subscribe to at once (1 to 1024): "
          "each is a stream from xformd and a thread");
ABSL_FLAG(int, idle_timeout_s, 30,
          "Close a tab that has read nothing, not even a ping, this long (1 "
          "to 86400)");

namespace {

volatile std::sig_atomic_t stop_signal = 0;
void OnSignal(int signal) { stop_signal = signal; }

// Every flag, read and checked in one place.
struct WebConfig {
  xform::ClientOptions client;
  xform::web::GatewayOptions gateway;
};

absl::StatusOr<WebConfig> WebConfigFromFlags() {
  // A value out of range is a usage error rather than quietly clamped:
  // --max_tabs=0 would refuse every tab, and an operator should hear so.
  for (const auto& [name, value, low, high] :
       {std::tuple{"--threads", absl::GetFlag(FLAGS_threads), 1, 64},
        {"--max_tabs", absl::GetFlag(FLAGS_max_tabs), 1, 100'000},
        {"--max_inbound_bytes", absl::GetFlag(FLAGS_max_inbound_bytes), 16,
         1 << 20},
        {"--idle_timeout_s", absl::GetFlag(FLAGS_idle_timeout_s), 1, 86'400},
        {"--foxglove_max_clients", absl::GetFlag(FLAGS_foxglove_max_clients), 1,
         10'000},
        {"--foxglove_max_worlds", absl::GetFlag(FLAGS_foxglove_max_worlds), 1,
         1024}}) {
    if (value < low || value > high) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be ", low, " to ", high));
    }
  }
  WebConfig config;
  config.client.address = absl::GetFlag(FLAGS_server);
  config.client.connect_timeout = absl::ZeroDuration();  // Serve meanwhile.
  if (absl::Status status = xform::tools::ApplyClientFlags(&config.client);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::vector<xform::MirrorOptions::Encoding>> encodings =
      xform::tools::EncodingFlags();
  if (!encodings.ok() || encodings->size() != 1) {
    return absl::InvalidArgumentError("--encoding: raw or compact");
  }
  xform::web::GatewayOptions& options = config.gateway;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.allowed_hosts = absl::GetFlag(FLAGS_allowed_hosts);
  options.web_root = absl::GetFlag(FLAGS_web_root);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.max_tabs = absl::GetFlag(FLAGS_max_tabs);
  options.max_inbound_bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_max_inbound_bytes));
  options.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_idle_timeout_s));
  options.upstream_encoding = encodings->front();
  options.foxglove_listen = absl::GetFlag(FLAGS_foxglove_listen);
  options.foxglove_allowed_origins =
      absl::GetFlag(FLAGS_foxglove_allowed_origins);
  options.foxglove_max_clients = absl::GetFlag(FLAGS_foxglove_max_clients);
  options.foxglove_max_worlds = absl::GetFlag(FLAGS_foxglove_max_worlds);
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "xform-web --server=HOST:PORT [--listen=127.0.0.1:8080] "
      "[--token_file=FILE] "
      "[--tls_ca=...]: a live view of xformd's worlds in a browser");
  absl::ParseCommandLine(argc, argv);
  xform::internal::UseReleaseMutexes();
  const absl::StatusOr<WebConfig> config = WebConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<xform::Client>> client =
      xform::Client::Connect(config->client);
  if (!client.ok()) {
    std::fprintf(stderr, "error: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::StatusOr<std::unique_ptr<xform::web::WebGateway>> gateway =
      xform::web::WebGateway::Start(**client, config->gateway);
  if (!gateway.ok()) {
    std::fprintf(stderr, "error: %s\n", gateway.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "xform-web: serving http://%s/ (port %d) for xformd at %s\n",
               config->gateway.listen.c_str(), (*gateway)->port(),
               config->client.address.c_str());
  if ((*gateway)->foxglove_port() != 0) {
    std::fprintf(stderr, "xform-web: Foxglove at ws://%s (port %d)\n",
                 config->gateway.foxglove_listen.c_str(),
                 (*gateway)->foxglove_port());
  }
  while (stop_signal == 0) absl::SleepFor(absl::Milliseconds(100));
  std::fprintf(stderr, "xform-web: stopping on signal %d\n",
               static_cast<int>(stop_signal));
  gateway->reset();
  return 0;
}
