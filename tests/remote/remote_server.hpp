// Servers for the remote-shard tests, both on 127.0.0.1 and a free port, stopped by their
// destructor: a real nginx (Debian's package, run in the foreground with its own prefix, pid,
// log and temp directories) and a tiny fault-injecting HTTP server (one thread) that answers each
// request by a script: 503, a connection cut mid-body, a body shorter than its Content-Length,
// a corrupted body, or the file (206 for a Range request).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

extern char** environ;

namespace sluice_remote_test {

// A port on 127.0.0.1 nobody listens on now (bound, read back, closed).
inline int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind failed");
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

inline bool port_answers(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

// SLUICE_TEST_NGINX names the binary (set to a path that does not exist, it makes the nginx cases
// skip: how the skip itself is checked); otherwise PATH, then the sbin directories.
inline std::string find_nginx() {
  if (const char* e = std::getenv("SLUICE_TEST_NGINX")) return ::access(e, X_OK) == 0 ? std::string(e) : std::string();
  std::vector<std::string> dirs;
  if (const char* p = std::getenv("PATH")) {
    std::stringstream ss(p);
    for (std::string d; std::getline(ss, d, ':');) dirs.push_back(d);
  }
  dirs.insert(dirs.end(), {"/usr/sbin", "/usr/local/sbin", "/sbin"});
  for (const auto& d : dirs) {
    const std::string c = d + "/nginx";
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return {};
}

// nginx serving `root` at http://127.0.0.1:port/, plus /slow/ (the same files at 4 MB/s) and
// /forbidden/ (always 403). Skips the test case (exit 77) when nginx is not installed.
class nginx_server {
 public:
  explicit nginx_server(const std::string& root) {
    const std::string exe = find_nginx();
    if (exe.empty()) sluice_test::skip("nginx is not installed (Debian: apt-get install nginx)");
    const std::string p = dir_.path().string();
    std::filesystem::create_directories(p + "/logs");
    std::filesystem::create_directories(p + "/tmp");
    port_ = free_port();
    std::ofstream c(p + "/nginx.conf");
    if (::geteuid() == 0) c << "user root root;\n";  // the worker must read the test's 0700 temp dirs
    c << "daemon off;\nworker_processes 1;\npid " << p << "/nginx.pid;\nerror_log " << p << "/logs/error.log;\n"
      << "events { worker_connections 64; }\n"
      << "http {\n  access_log " << p << "/logs/access.log;\n"
      << "  client_body_temp_path " << p << "/tmp/body;\n  proxy_temp_path " << p << "/tmp/proxy;\n"
      << "  fastcgi_temp_path " << p << "/tmp/fastcgi;\n  uwsgi_temp_path " << p << "/tmp/uwsgi;\n"
      << "  scgi_temp_path " << p << "/tmp/scgi;\n  default_type application/octet-stream;\n"
      << "  server {\n    listen 127.0.0.1:" << port_ << ";\n    root " << root << ";\n"
      << "    location /slow/ { alias " << root << "/; limit_rate 4m; }\n"
      << "    location /forbidden/ { return 403; }\n  }\n}\n";
    c.close();
    std::vector<std::string> args = {exe, "-p", p, "-c", p + "/nginx.conf", "-e", p + "/logs/error.log"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start nginx");
    for (int i = 0; i < 500 && !port_answers(port_); ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("nginx exited at start: " + log_text("error.log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!port_answers(port_)) throw std::runtime_error("nginx did not listen: " + log_text("error.log"));
  }
  nginx_server(const nginx_server&) = delete;
  nginx_server& operator=(const nginx_server&) = delete;
  ~nginx_server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);  // fast shutdown: the master stops its worker and exits
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }
  // Requests for `path` (e.g. "/a.sluice") in the access log. nginx logs a request after its
  // reply is sent, so this waits (up to 5 s) for at least `expected`, then 50 ms more for any extra.
  [[nodiscard]] int requests_for(const std::string& path, int expected) const {
    auto count = [&] {
      std::ifstream f(dir_.path() / "logs/access.log");
      int n = 0;
      for (std::string line; std::getline(f, line);)
        if (line.find("\"GET " + path + " ") != std::string::npos) ++n;
      return n;
    };
    for (int i = 0; i < 250 && count() < expected; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return count();
  }
  [[nodiscard]] std::string log_text(const std::string& name) const {
    std::ifstream f(dir_.path() / "logs" / name);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  sluice_test::temp_dir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

#ifndef SLUICE_TEST_VENV_DIR  // tests/remote/CMakeLists.txt sets both
#define SLUICE_TEST_VENV_DIR "build/test-venv"
#endif
#ifndef SLUICE_TEST_MOTO_SETUP
#define SLUICE_TEST_MOTO_SETUP "tests/remote/moto_setup.py"
#endif

// moto's S3 server (PyPI: moto[server], installed by .ci/test into build/test-venv) on 127.0.0.1,
// started with signature checking on: moto_setup.py (beside this file) makes an IAM user and key,
// a bucket, and uploads `dir` under `prefix` with that key. Skips the case (exit 77) when moto is
// not installed. SLUICE_TEST_VENV names another virtual environment holding it.
class moto_server {
 public:
  moto_server(const std::string& bucket, const std::string& prefix, const std::string& dir) {
    const std::string venv = std::getenv("SLUICE_TEST_VENV") ? std::getenv("SLUICE_TEST_VENV") : SLUICE_TEST_VENV_DIR;
    const std::string exe = venv + "/bin/moto_server", python = venv + "/bin/python3";
    if (::access(exe.c_str(), X_OK) != 0)
      sluice_test::skip("moto is not installed in " + venv + " (.ci/test installs it: python3 -m venv " + venv +
                        " && " + venv + "/bin/pip install 'moto[server]')");
    port_ = free_port();
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {exe, "-H", "127.0.0.1", "-p", port};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = {"INITIAL_NO_AUTH_ACTION_COUNT=3"};
    for (char** e = environ; *e; ++e)
      if (!std::string_view(*e).starts_with("INITIAL_NO_AUTH_ACTION_COUNT=")) env_s.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log = dir_.path().string() + "/moto.log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = ::posix_spawn(&pid_, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("cannot start moto_server");
    for (int i = 0; i < 1500 && !port_answers(port_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!port_answers(port_)) throw std::runtime_error("moto_server did not listen within 30 s");
    const std::string cmd = python + " " + std::string(SLUICE_TEST_MOTO_SETUP) + " " + endpoint() + " " + bucket + " '" +
                            prefix + "' '" + dir + "' 2>>" + log;
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run moto_setup.py");
    char key[256] = {}, secret[256] = {};
    const int got = std::fscanf(p, "%255s %255s", key, secret);
    const int st = ::pclose(p);
    if (got != 2 || st != 0) throw std::runtime_error("moto_setup.py failed: see " + log);
    access_key_ = key;
    secret_key_ = secret;
  }
  moto_server(const moto_server&) = delete;
  moto_server& operator=(const moto_server&) = delete;
  ~moto_server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] const std::string& access_key() const noexcept { return access_key_; }
  [[nodiscard]] const std::string& secret_key() const noexcept { return secret_key_; }

 private:
  sluice_test::temp_dir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::string access_key_, secret_key_;
};

enum class fault { ok, status_503, status_404, cut_mid_body, short_body, corrupt, ignore_range, stall };

// Serves one file at any path, answering the k-th request by script[k] (the last entry repeats).
// Each connection is served by its own thread (a stalled one does not hold up the retry).
class fault_server {
 public:
  fault_server(std::vector<std::byte> body, std::vector<fault> script) : body_(std::move(body)), script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("fault_server: cannot listen");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  fault_server(const fault_server&) = delete;
  fault_server& operator=(const fault_server&) = delete;
  ~fault_server() {
    stop_.store(true);
    thread_.join();
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }
  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }
  [[nodiscard]] int requests() const {
    std::lock_guard lk(m_);
    return static_cast<int>(heads_.size());
  }
  // The request heads received, in order.
  [[nodiscard]] std::vector<std::string> heads() const {
    std::lock_guard lk(m_);
    return heads_;
  }

 private:
  void run() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      conns_.emplace_back([this, c] { serve(c); });
    }
  }
  static void send_all(int c, const void* p, std::size_t n) {
    const char* b = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::send(c, b, n, MSG_NOSIGNAL);
      if (w <= 0) return;
      b += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void serve(int c) {
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
      const ssize_t r = ::recv(c, buf, sizeof buf, 0);
      if (r <= 0) break;
      head.append(buf, static_cast<std::size_t>(r));
    }
    std::size_t k = 0;
    {
      std::lock_guard lk(m_);
      k = heads_.size();
      heads_.push_back(head);
    }
    const fault f = script_.empty() ? fault::ok : script_[std::min(k, script_.size() - 1)];
    std::size_t from = 0;
    if (const auto r = head.find("Range: bytes="); r != std::string::npos && f != fault::ignore_range)
      from = std::stoul(head.substr(r + 13));
    const std::size_t n = body_.size();
    auto reply = [&](const std::string& status, const std::string& extra, std::size_t claimed) {
      const std::string h = "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(claimed) +
                            "\r\nConnection: close\r\n" + extra + "\r\n";
      send_all(c, h.data(), h.size());
    };
    switch (f) {
      case fault::status_503: {
        const std::string b = "busy";
        reply("503 Service Unavailable", "", b.size());
        send_all(c, b.data(), b.size());
        break;
      }
      case fault::status_404: {
        const std::string b = "no such file";
        reply("404 Not Found", "", b.size());
        send_all(c, b.data(), b.size());
        break;
      }
      case fault::cut_mid_body: {  // half the body, then a reset
        reply("200 OK", "", n);
        send_all(c, body_.data(), n / 2);
        linger l{1, 0};
        ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        ::close(c);
        return;
      }
      case fault::stall:  // half the body, then nothing for up to 3 s (the client's timeout cuts it)
        reply("200 OK", "", n);
        send_all(c, body_.data(), n / 2);
        for (int i = 0; i < 300 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        break;
      case fault::short_body:  // the right status and length, 100 bytes short, then a clean close
        reply("200 OK", "", n);
        send_all(c, body_.data(), n - 100);
        break;
      case fault::corrupt: {
        std::vector<std::byte> bad = body_;
        bad[bad.size() / 2] ^= std::byte{0x5a};
        reply("200 OK", "", n);
        send_all(c, bad.data(), n);
        break;
      }
      case fault::ok:
      case fault::ignore_range:
        if (from > 0 && from < n) {
          reply("206 Partial Content",
                "Content-Range: bytes " + std::to_string(from) + "-" + std::to_string(n - 1) + "/" + std::to_string(n) + "\r\n",
                n - from);
          send_all(c, body_.data() + from, n - from);
        } else {
          reply("200 OK", "", n);
          send_all(c, body_.data(), n);
        }
        break;
    }
    ::shutdown(c, SHUT_WR);
    ::close(c);
  }

  std::vector<std::byte> body_;
  std::vector<fault> script_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex m_;
  std::vector<std::string> heads_;
  std::thread thread_;
  std::vector<std::thread> conns_;  // touched by the accept thread only, joined after it
};

}  // namespace sluice_remote_test
