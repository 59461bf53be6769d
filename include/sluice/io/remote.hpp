// sluice/io/remote.hpp — sluice shards by http(s):// or s3:// URL, fetched into a node-local disk
// tier and read through the same mmap reader as local shards. Needs libcurl: link sluice::curl
// (Debian: libcurl4-openssl-dev). Not in the umbrella header for that reason.
//
// remote_shards is a record_reader over the shards concatenated in order, with whole shards for
// ranks (sample::shard_split). With `.sizes` (or an index beside the shards) a shard is fetched
// when its first record is read, so a rank fetches only its own; prefetch(s) and
// sample::fetch_ahead fetch ahead of the loader. remote_mds reads an MDS dataset the same way.
// A fetch retries with backoff on transient failures (resuming a cut transfer with a Range
// request), writes a partial file, checks the whole shard (every record's CRC-32C, and the file's
// when an index gives it), and only then publishes it: nothing partial or unchecked is ever read.
// Errors: a 4xx is an http_error naming the URL and the status (S3's error code too); after the
// last attempt the error names the URL, the attempts and the cause; a shard that cannot be fetched
// fails every record read from it (on_error::skip skips and counts them).
// Threads: records may be read from several threads; a shard is fetched once. Every rule, S3
// credentials and redirects: docs/remote.md.
#pragma once

#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/core/concepts.hpp"
#include "sluice/core/error.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/lazy_open.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/mds.hpp"
#include "sluice/io/node_tier.hpp"
#include "sluice/io/regular_file.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/shard_index.hpp"

namespace sluice::io {

struct http_options {
  int max_attempts = 6;                               // tries per download, the first included
  std::chrono::milliseconds backoff{100};             // the first retry waits up to this
  std::chrono::milliseconds max_backoff{5000};        // no wait is longer
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds timeout{0};               // a whole transfer; 0: no limit
  long stall_seconds = 30;                            // a transfer below 1 byte/s this long is cut
  bool resume = true;                                 // continue a cut transfer with a Range request
};

struct http_result {
  std::uint64_t bytes = 0;   // the file's size
  int attempts = 0;          // requests made (1: no retry)
  int resumed = 0;           // of them, Range requests answered with 206
  long status = 0;           // the last HTTP status
};

// An HTTP download that failed: names the URL, the status (0 when none came back) and attempts.
class http_error : public io_error {
 public:
  http_error(std::string url, long status, int attempts, std::string_view what)
      : io_error(std::move(url), what), status_(status), attempts_(attempts) {}
  [[nodiscard]] long status() const noexcept { return status_; }
  [[nodiscard]] int attempts() const noexcept { return attempts_; }

 private:
  long status_;
  int attempts_;
};

namespace detail {

inline void curl_init_once() {
  static const bool ok = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  if (!ok) throw io_error("libcurl", "cannot initialise");
}

struct curl_deleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};

// One response's state, shared by the header and write callbacks.
struct http_transfer {
  CURL* curl = nullptr;
  int fd = -1;
  std::uint64_t range_from = 0;    // the Range asked for (0: none)
  std::uint64_t at = 0;            // the next byte's offset in the file
  std::uint64_t received = 0;      // body bytes of this response
  std::int64_t range_start = -1;   // the Content-Range start of this response
  bool started = false, keep = false, bad_range = false;
  long status = 0;
  int write_errno = 0;
  std::string body_head;           // the start of an error response's body (for the message)
};

inline std::size_t http_header_cb(char* p, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<http_transfer*>(user);
  const std::string_view h(p, size * n);
  if (h.starts_with("HTTP/")) {  // a new response (after a redirect or a 100): reset
    t.range_start = -1;
    t.started = false;
  }
  constexpr std::string_view cr = "content-range:";
  if (h.size() > cr.size()) {
    std::string low(h.substr(0, cr.size()));
    for (auto& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low == cr) {
      const auto b = h.find("bytes ");
      if (b != std::string_view::npos) {
        std::int64_t v = 0;
        std::size_t i = b + 6;
        bool any = false;
        while (i < h.size() && h[i] >= '0' && h[i] <= '9') v = v * 10 + (h[i++] - '0'), any = true;
        if (any) t.range_start = v;
      }
    }
  }
  return size * n;
}

inline std::size_t http_write_cb(char* p, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<http_transfer*>(user);
  const std::size_t len = size * n;
  if (!t.started) {
    t.started = true;
    curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &t.status);
    t.keep = false;
    if (t.status == 200) {
      t.keep = true;
      t.at = 0;  // the whole file: from the start, whatever was asked
      if (::ftruncate(t.fd, 0) != 0) {
        t.write_errno = errno;
        return 0;
      }
    } else if (t.status == 206) {
      if (t.range_from == 0 || t.range_start != static_cast<std::int64_t>(t.range_from)) {
        t.bad_range = true;
        return 0;
      }
      t.keep = true;
      t.at = t.range_from;
    }
  }
  t.received += len;
  if (!t.keep) {
    if (t.body_head.size() < 200) t.body_head.append(p, std::min<std::size_t>(len, 200 - t.body_head.size()));
    return len;
  }
  std::size_t done = 0;
  while (done < len) {
    const ssize_t w = ::pwrite(t.fd, p + done, len - done, static_cast<off_t>(t.at));
    if (w < 0) {
      if (errno == EINTR) continue;
      t.write_errno = errno;
      return 0;
    }
    done += static_cast<std::size_t>(w);
    t.at += static_cast<std::uint64_t>(w);
  }
  return len;
}

inline bool retryable_status(long s) noexcept { return s == 408 || s == 429 || (s >= 500 && s <= 599); }

inline std::chrono::milliseconds backoff_for(const http_options& o, int retry) {
  thread_local std::minstd_rand rng{static_cast<std::uint32_t>(std::random_device{}() ^ static_cast<std::uint32_t>(::getpid()))};
  long long d = o.backoff.count();
  for (int i = 1; i < retry && d < o.max_backoff.count(); ++i) d *= 2;
  d = std::min<long long>(d, o.max_backoff.count());
  if (d <= 1) return std::chrono::milliseconds(d);
  std::uniform_int_distribution<long long> u(d / 2, d);
  return std::chrono::milliseconds(u(rng));
}

}  // namespace detail

// ---- s3:// URLs: an S3 (or S3-compatible) GET signed with SigV4 by libcurl ----

// Where an s3://bucket/key URL goes and how it is signed, from the usual AWS settings:
//   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the profile
//                AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials);
//                none: the request goes unsigned (public buckets)
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's `region` in AWS_CONFIG_FILE
//                (~/.aws/config), else us-east-1
//   endpoint     AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (an S3-compatible server: path-style
//                <endpoint>/<bucket>/<key>), else https://<bucket>.s3.<region>.amazonaws.com/<key>
struct s3_target {
  std::string http_url;
  std::string region;
  std::string access_key, secret_key, session_token;
  [[nodiscard]] bool signed_request() const noexcept { return !access_key.empty(); }
};

namespace detail {

inline std::string env_or(const char* name, std::string fallback = {}) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// `key` of [section] in an INI file (the AWS shared files), or empty.
inline std::string ini_value(const std::string& path, const std::string& section, const std::string& key) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // no such file: no value
  // A regular file of at most 1 MiB (a FIFO is refused, not waited on).
  const std::string text = read_small_file(path, std::size_t{1} << 20, "an AWS shared config file");
  std::string cur, out;
  auto trim = [](std::string_view t) {
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
    return std::string(t);
  };
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string l = trim(std::string_view(text).substr(at, nl - at));
    at = nl + 1;
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      cur = trim(std::string_view(l).substr(1, l.size() - 2));
      continue;
    }
    const auto eq = l.find('=');
    if (cur == section && eq != std::string::npos && trim(std::string_view(l).substr(0, eq)) == key) {
      out = trim(std::string_view(l).substr(eq + 1));
      break;
    }
  }
  return out;
}

// Percent-encodes an S3 key for the URL path (RFC 3986 unreserved and '/' kept), as SigV4's
// canonical URI expects.
inline std::string s3_encode_key(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

// The S3 error code of an error response body (<Code>SignatureDoesNotMatch</Code>), or empty.
inline std::string s3_error_code(std::string_view body) {
  const auto a = body.find("<Code>");
  if (a == std::string_view::npos) return {};
  const auto b = body.find("</Code>", a);
  return b == std::string_view::npos ? std::string() : std::string(body.substr(a + 6, b - a - 6));
}

}  // namespace detail

// Resolves an s3://bucket/key URL (usage-checked: a bucket and a key) with the settings above.
inline s3_target resolve_s3(const std::string& url) {
  std::string_view rest = std::string_view(url).substr(5);  // after "s3://"
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 >= rest.size())
    throw http_error(url, 0, 0, "not an s3://bucket/key URL:");
  const std::string bucket(rest.substr(0, slash));
  const std::string key = detail::s3_encode_key(rest.substr(slash + 1));
  s3_target t;
  const std::string home = detail::env_or("HOME");
  const std::string profile = detail::env_or("AWS_PROFILE", "default");
  t.access_key = detail::env_or("AWS_ACCESS_KEY_ID");
  t.secret_key = detail::env_or("AWS_SECRET_ACCESS_KEY");
  t.session_token = detail::env_or("AWS_SESSION_TOKEN");
  if (t.access_key.empty() || t.secret_key.empty()) {
    const std::string creds = detail::env_or("AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials");
    t.access_key = detail::ini_value(creds, profile, "aws_access_key_id");
    t.secret_key = detail::ini_value(creds, profile, "aws_secret_access_key");
    t.session_token = detail::ini_value(creds, profile, "aws_session_token");
    if (t.secret_key.empty()) t.access_key.clear();
  }
  t.region = detail::env_or("AWS_REGION", detail::env_or("AWS_DEFAULT_REGION"));
  if (t.region.empty()) {
    const std::string config = detail::env_or("AWS_CONFIG_FILE", home + "/.aws/config");
    t.region = detail::ini_value(config, profile == "default" ? "default" : "profile " + profile, "region");
  }
  if (t.region.empty()) t.region = "us-east-1";
  std::string endpoint = detail::env_or("AWS_ENDPOINT_URL_S3", detail::env_or("AWS_ENDPOINT_URL"));
  while (endpoint.ends_with("/")) endpoint.pop_back();
  t.http_url = endpoint.empty() ? "https://" + bucket + ".s3." + t.region + ".amazonaws.com/" + key
                                : endpoint + "/" + bucket + "/" + key;
  return t;
}

// Downloads `url` whole into `fd` (a regular file, truncated or overwritten from offset 0),
// retrying as the header says. Throws http_error (status, attempts, URL), or io_error carrying the
// errno of a failed write (ENOSPC on a full file system).
inline http_result http_get(const std::string& url, int fd, const http_options& o = {}) {
  detail::curl_init_once();
  const bool s3 = url.starts_with("s3://");
  if (!(url.starts_with("http://") || url.starts_with("https://") || s3))
    throw http_error(url, 0, 0, "not an http://, https:// or s3:// URL:");
  const s3_target target = s3 ? resolve_s3(url) : s3_target{};
  const std::string& fetch_url = s3 ? target.http_url : url;
  const std::string sigv4 = "aws:amz:" + target.region + ":s3";
  const std::string userpwd = target.access_key + ":" + target.secret_key;
  http_result res;
  std::uint64_t have = 0;  // bytes of the file already in fd, from the start
  std::string last = "no attempt";
  const int attempts = std::max(1, o.max_attempts);
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) std::this_thread::sleep_for(detail::backoff_for(o, attempt - 1));
    std::unique_ptr<CURL, detail::curl_deleter> c(curl_easy_init());
    if (!c) throw http_error(url, 0, attempt, "libcurl could not make a handle for");
    detail::http_transfer t;
    t.curl = c.get();
    t.fd = fd;
    t.range_from = o.resume ? have : 0;
    if (t.range_from == 0 && ::ftruncate(fd, 0) != 0) throw io_error(url, "cannot truncate the download file of", errno);
    char err[CURL_ERROR_SIZE] = {};
    const std::string range = std::to_string(t.range_from) + "-";
    curl_easy_setopt(c.get(), CURLOPT_URL, fetch_url.c_str());
    curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, s3 ? 0L : 1L);  // a signed request is not re-sent elsewhere
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(nullptr, &curl_slist_free_all);
    if (s3 && target.signed_request()) {
      // SigV4 by libcurl (7.75+); S3 also wants the payload's hash (a GET's is the empty one's).
      curl_easy_setopt(c.get(), CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(c.get(), CURLOPT_USERPWD, userpwd.c_str());
      curl_slist* h = curl_slist_append(nullptr, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      if (h && !target.session_token.empty()) h = curl_slist_append(h, ("x-amz-security-token: " + target.session_token).c_str());
      headers.reset(h);
      curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
    }
    curl_easy_setopt(c.get(), CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_BUFFERSIZE, 512L * 1024);  // fewer, larger writes (default 16 KiB)
    curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.connect_timeout.count()));
    if (o.timeout.count() > 0) curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(o.timeout.count()));
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, o.stall_seconds);
    curl_easy_setopt(c.get(), CURLOPT_HEADERFUNCTION, &detail::http_header_cb);
    curl_easy_setopt(c.get(), CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, &detail::http_write_cb);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &t);
    if (t.range_from > 0) curl_easy_setopt(c.get(), CURLOPT_RANGE, range.c_str());
    const CURLcode rc = curl_easy_perform(c.get());
    long status = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
    res.attempts = attempt;
    res.status = status;
    if (t.write_errno != 0) throw io_error(url, "cannot write to the disk tier the download of", t.write_errno);
    if (t.keep) have = t.at;  // what arrived of a 200/206 body stays, for a Range request
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL)
      throw http_error(url, 0, attempt, std::string("bad URL (curl: ") + (err[0] ? err : curl_easy_strerror(rc)) + "):");
    if (t.bad_range) {
      have = 0;
      last = "a 206 reply for another range than asked";
      continue;
    }
    if (rc == CURLE_OK) {
      if (status == 200 || status == 206) {
        curl_off_t cl = -1;
        curl_easy_getinfo(c.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        if (cl >= 0 && static_cast<std::uint64_t>(cl) != t.received) {
          last = "truncated body: Content-Length " + std::to_string(cl) + ", received " + std::to_string(t.received);
          continue;
        }
        if (status == 206) ++res.resumed;
        res.bytes = have;
        return res;
      }
      if (status == 416 && t.range_from > 0) {  // the range is past the file: fetch it whole
        have = 0;
        last = "HTTP 416 for a resumed range";
        continue;
      }
      if (!detail::retryable_status(status)) {
        std::string what = "HTTP " + std::to_string(status);
        if (s3) {
          const std::string code = detail::s3_error_code(t.body_head);
          if (!code.empty()) what += " " + code;
          if (!target.signed_request() && (status == 401 || status == 403))
            what += ", sent unsigned: no AWS credentials were found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ~/.aws/credentials)";
          what += ", from " + fetch_url + ",";
        }
        throw http_error(url, status, attempt, what + " (not retried) from");
      }
      last = "HTTP " + std::to_string(status);
      continue;
    }
    last = std::string("curl: ") + (err[0] ? err : curl_easy_strerror(rc));
    if (status != 0) last += " (HTTP " + std::to_string(status) + ")";
  }
  throw http_error(url, res.status, attempts,
                   "gave up after " + std::to_string(attempts) + " attempts (last: " + last + ") fetching");
}

// The file name a URL gets in a tier: its last path segment (up to 80 characters of
// [A-Za-z0-9._-]) and a 64-bit hash of the whole URL, so two URLs never share a name.
inline std::string tier_name_for(std::string_view url) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : url) h = (h ^ c) * 0x100000001b3ull;
  std::string_view base = url;
  if (auto q = base.find_first_of("?#"); q != std::string_view::npos) base = base.substr(0, q);
  if (auto s = base.rfind('/'); s != std::string_view::npos) base = base.substr(s + 1);
  std::string name;
  for (char c : base.substr(0, 80)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    name += ok ? c : '_';
  }
  while (!name.empty() && name.front() == '.') name.erase(0, 1);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return (name.empty() ? std::string("shard") : name) + "-" + hex;
}

struct fetch_options {
  http_options http{};
  std::optional<std::uint32_t> crc32c{};   // the whole file's CRC-32C, from an index
  bool check_shard = true;                 // open it as a sluice shard and check every CRC
  int downloads = 2;                       // a file failing a check is fetched again, up to this
  std::uint64_t expected_bytes = 0;        // its size, if known (checked; room is made before the fetch)
  // A check of another format's file (MDS: remote_mds), run on the complete download before it is
  // published; a format_error from it rejects the download like a failed CRC.
  std::function<void(const std::string& path)> check{};
};

// Checks a complete download before it is published; a format_error names the URL.
inline void check_download(const std::string& url, const std::string& path, const fetch_options& o) {
  if (o.expected_bytes > 0) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw io_error(path, "cannot stat", errno);
    if (static_cast<std::uint64_t>(st.st_size) != o.expected_bytes)
      throw format_error(url, {}, "size mismatch: the index says " + std::to_string(o.expected_bytes) +
                                      " bytes, the download has " + std::to_string(st.st_size));
  }
  if (o.crc32c) {
    const mapped_file f(path, {.advice = access::sequential});
    const std::uint32_t got = crc32c(f.bytes());
    if (got != *o.crc32c) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "whole-file CRC-32C mismatch: the index says %08x, the download (%zu bytes) has %08x",
                    static_cast<unsigned>(*o.crc32c), f.bytes().size(), static_cast<unsigned>(got));
      throw format_error(url, {}, msg);
    }
  }
  if (o.check) {
    try {
      o.check(path);
    } catch (const format_error& e) {
      throw format_error(url, {.record = e.record(), .offset = e.offset()}, "downloaded shard rejected: " + e.cause());
    }
  }
  if (o.check_shard) {
    try {
      const shard_reader r(path, {.verify = true, .map = {.advice = access::sequential}});
      (void)r.verify_all();
    } catch (const format_error& e) {
      throw format_error(url, {.record = e.record(), .offset = e.offset()}, "downloaded shard rejected: " + e.cause());
    }
  }
}

// The shard at `url`, in the tier: fetched (once per node), checked and published when absent.
// Keep the tier_file while the shard is read (it keeps the file from eviction).
inline tier_file fetch_shard(node_tier& tier, const std::string& url, const fetch_options& o = {}) {
  const std::string name = tier_name_for(url);
  const int downloads = std::max(1, o.downloads);
  for (int d = 1;; ++d) {
    try {
      return tier.acquire(
          name, [&](int fd, const std::string&) { (void)http_get(url, fd, o.http); },
          [&](const std::string& tmp) { check_download(url, tmp, o); }, o.expected_bytes);
    } catch (const format_error& e) {
      if (d >= downloads)
        throw format_error(url, {.record = e.record(), .offset = e.offset()},
                           e.cause() + " (" + std::to_string(d) + (d == 1 ? " download" : " downloads") +
                               "; not kept in the disk tier)");
    }
  }
}

struct remote_shards_options {
  std::vector<std::size_t> sizes{};          // records per shard; empty: each fetched at construction to count it
  std::vector<std::uint32_t> crc32c{};       // whole-file CRC-32C per shard (from an index); empty: none
  std::vector<std::uint64_t> bytes{};        // file size per shard (from an index); empty: not checked
  fetch_options fetch{};                     // its crc32c and expected_bytes are taken from the lists above
  shard_options shard{};                     // how each shard is read (record CRCs on each access by default)
};

class remote_shards {
 public:
  using reader_concept = reader_tag;

  // The tier must outlive this reader.
  remote_shards(std::vector<std::string> urls, node_tier& tier, remote_shards_options o = {})
      : tier_(&tier), opt_(std::move(o)) {
    if (urls.empty()) throw usage_error("sluice: remote_shards needs at least one URL");
    if (!opt_.sizes.empty() && opt_.sizes.size() != urls.size())
      throw usage_error("sluice: remote_shards: .sizes has " + std::to_string(opt_.sizes.size()) + " entries for " +
                        std::to_string(urls.size()) + " URLs (one per shard, or none)");
    if (!opt_.crc32c.empty() && opt_.crc32c.size() != urls.size())
      throw usage_error("sluice: remote_shards: .crc32c has " + std::to_string(opt_.crc32c.size()) + " entries for " +
                        std::to_string(urls.size()) + " URLs (one per shard, or none)");
    if (!opt_.bytes.empty() && opt_.bytes.size() != urls.size())
      throw usage_error("sluice: remote_shards: .bytes has " + std::to_string(opt_.bytes.size()) + " entries for " +
                        std::to_string(urls.size()) + " URLs (one per shard, or none)");
    for (auto& u : urls) {
      auto l = std::make_unique<lazy_shard>();
      l->url = std::move(u);
      shards_.push_back(std::move(l));
    }
    name_ = shards_.size() == 1 ? shards_[0]->url
                                : shards_[0]->url + " (+" + std::to_string(shards_.size() - 1) + " more shards)";
    first_.reserve(shards_.size() + 1);
    first_.push_back(0);
    for (std::size_t s = 0; s < shards_.size(); ++s)
      first_.push_back(first_.back() + (opt_.sizes.empty() ? open(s).reader.size() : opt_.sizes[s]));
  }

  remote_shards(remote_shards&&) noexcept = default;
  remote_shards& operator=(remote_shards&&) noexcept = default;
  ~remote_shards() { ahead_.stop(); }

  [[nodiscard]] std::size_t size() const noexcept { return static_cast<std::size_t>(first_.back()); }
  [[nodiscard]] std::string_view path() const noexcept { return name_; }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const {
    const std::size_t s = shard_of(i);
    return open(s).reader.record(static_cast<std::size_t>(i - first_[s]));
  }
  [[nodiscard]] std::int64_t label(std::size_t i) const {
    const std::size_t s = shard_of(i);
    return open(s).reader.label(static_cast<std::size_t>(i - first_[s]));
  }

  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  [[nodiscard]] const std::string& shard_url(std::size_t s) const { return shards_.at(s)->url; }
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> shard_range(std::size_t s) const {
    return {first_.at(s), first_.at(s + 1)};
  }
  [[nodiscard]] std::size_t shard_of(std::uint64_t i) const {
    if (i >= first_.back())
      throw usage_error("sluice: record " + std::to_string(i) + " out of range for '" + name_ + "' (" +
                        std::to_string(first_.back()) + " records)");
    return static_cast<std::size_t>(std::upper_bound(first_.begin() + 1, first_.end(), i) - first_.begin() - 1);
  }
  [[nodiscard]] std::vector<std::size_t> sizes() const {
    std::vector<std::size_t> out(shards_.size());
    for (std::size_t s = 0; s < out.size(); ++s) out[s] = static_cast<std::size_t>(first_[s + 1] - first_[s]);
    return out;
  }
  // Whether shard s has been fetched and opened by this reader.
  [[nodiscard]] bool is_open(std::size_t s) const {
    return shards_.at(s)->state.ready();
  }
  // Fetches shard s into the tier and opens it on a background thread; returns at once (see
  // mds_dataset::prefetch). sample::fetch_ahead calls it for the windows ahead of the loader.
  void prefetch(std::size_t s) const {
    if (s >= shards_.size() || shards_[s]->state.ready()) return;
    ahead_.post([this, s] { (void)open(s); });
  }

  // Closes every open shard (unmaps it and lets go of its tier file, which the tier may then
  // evict; a shard read again is fetched again, or found in the tier), and forgets failures. Only
  // while nothing reads from this dataset: sample::fetch_ahead calls it between epochs, when the
  // loader's workers are idle. Waits for a background prefetch in progress.
  void release_all() const {
    ahead_.stop();
    for (const auto& l : shards_) l->state.reset();
  }

  // Shard s's local file in the tier (fetching it if needed) and its reader.
  [[nodiscard]] const std::string& local_path(std::size_t s) const { return open(s).file.path(); }
  [[nodiscard]] const shard_reader& shard(std::size_t s) const { return open(s).reader; }
  [[nodiscard]] node_tier& tier() const noexcept { return *tier_; }

 private:
  struct shard_state {
    tier_file file;
    shard_reader reader;
  };
  struct lazy_shard {
    std::string url;
    detail::lazy_open<shard_state> state;
  };

  const shard_state& open(std::size_t s) const {
    lazy_shard& l = *shards_[s];
    return l.state.get(
        [&] {
          fetch_options fo = opt_.fetch;
          if (!opt_.crc32c.empty()) fo.crc32c = opt_.crc32c[s];
          if (!opt_.bytes.empty()) fo.expected_bytes = opt_.bytes[s];
          tier_file f = fetch_shard(*tier_, l.url, fo);
          shard_reader r(f.path(), opt_.shard);
          if (!opt_.sizes.empty() && r.size() != opt_.sizes[s])
            throw format_error(l.url, {}, "the shard holds " + std::to_string(r.size()) +
                                              " records, but remote_shards_options::sizes says " +
                                              std::to_string(opt_.sizes[s]) + " (shard " + std::to_string(s) + ")");
          return std::make_unique<shard_state>(shard_state{std::move(f), std::move(r)});
        },
        detail::on_failure::remember);
  }

  mutable detail::opener_handle ahead_;  // first: moved (stopping the source's thread) before the rest
  node_tier* tier_;
  remote_shards_options opt_;
  std::vector<std::unique_ptr<lazy_shard>> shards_;
  std::vector<std::uint64_t> first_;
  std::string name_;
};

static_assert(record_reader<remote_shards>);

// A small file fetched whole into memory (an index): the same retries as http_get; a file over
// `max_bytes` is an http_error.
inline std::string http_get_text(const std::string& url, const http_options& o = {}, std::uint64_t max_bytes = 64u << 20) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::tmpfile(), &std::fclose);
  if (!f) throw io_error(url, "cannot make a temporary file for the download of", errno);
  const http_result r = http_get(url, ::fileno(f.get()), o);
  if (r.bytes > max_bytes)
    throw http_error(url, r.status, r.attempts, "more than " + std::to_string(max_bytes) + " bytes at");
  std::string text(static_cast<std::size_t>(r.bytes), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(::fileno(f.get()), text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n <= 0) throw io_error(url, "cannot read back the download of", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  return text;
}

// The shards an index lists (io/shard_index.hpp), as URLs beside the index, with their record
// counts (nothing is fetched to open it), sizes and whole-file CRC-32Cs (checked at each download).
//   auto data = sluice::io::remote_shards_from_index("http://store:8080/train/index.txt", tier);
inline remote_shards remote_shards_from_index(const std::string& index_url, node_tier& tier, remote_shards_options o = {}) {
  const auto entries = parse_shard_index(http_get_text(index_url, o.fetch.http), index_url);
  std::string_view base = index_url;
  if (auto q = base.find_first_of("?#"); q != std::string_view::npos) base = base.substr(0, q);
  base = base.substr(0, base.rfind('/') + 1);
  std::vector<std::string> urls;
  o.sizes.clear();
  o.crc32c.clear();
  o.bytes.clear();
  for (const auto& e : entries) {
    urls.push_back(std::string(base) + e.name);
    o.sizes.push_back(static_cast<std::size_t>(e.records));
    o.crc32c.push_back(e.crc32c);
    o.bytes.push_back(e.bytes);
  }
  return remote_shards(std::move(urls), tier, std::move(o));
}

// ---- MDS (MosaicML Streaming) datasets by URL ----

struct remote_mds_options {
  fetch_options fetch{};  // retries and timeouts (fetch.http); the shard checks are MDS's own
  mds_options mds{};
};

// An MDS dataset served over HTTP: `url` is its directory or its index.json. The index is fetched
// now; each shard when its first sample is read (by the worker preparing the batch that needs it),
// into the tier, with its size and offset table checked against the index before it is published
// (a download that fails them is fetched once more, then a format_error names the URL). Errors
// name the shard's URL. Compressed shards are refused here (io/mds.hpp). Keep `tier` alive while
// the dataset is used; an opened shard stays held in the tier until the dataset is destroyed.
//   auto data = sluice::io::remote_mds<schema>("http://store:8080/imagenet-mds/train", tier);
template <class Schema>
mds_dataset<Schema> remote_mds(const std::string& url, node_tier& tier, remote_mds_options o = {}) {
  std::string index_url = url;
  if (!index_url.ends_with(".json")) {
    while (index_url.ends_with("/")) index_url.pop_back();
    index_url += "/index.json";
  }
  const std::string base = index_url.substr(0, index_url.rfind('/') + 1);
  auto shards = parse_mds_index(http_get_text(index_url, o.fetch.http), index_url);
  for (std::size_t s = 0; s < shards.size(); ++s)
    if (!shards[s].compression.empty())
      throw format_error(index_url, {}, "shard " + std::to_string(s) + " (" + shards[s].zip_basename + ") is compressed (" +
                                            shards[s].compression +
                                            "): sluice reads uncompressed MDS shards; write them with compression=None");
  fetch_options fetch = o.fetch;
  fetch.check_shard = false;
  fetch.crc32c.reset();
  const map_options map = o.mds.map;
  auto open = [base, fetch, map, &tier](const mds_shard_info& info, std::size_t) {
    std::string shard_url = base + info.basename;
    fetch_options f = fetch;
    f.expected_bytes = info.bytes;
    f.check = [&info, &shard_url](const std::string& tmp) {
      const mapped_file m(tmp, {.advice = access::sequential, .populate = populate_mode::none});
      detail::check_mds_shard(m.bytes(), info, shard_url);
    };
    auto held = std::make_shared<tier_file>(fetch_shard(tier, shard_url, f));
    mapped_file m(held->path(), map);
    return mds_shard_file{std::move(shard_url), std::move(m), std::move(held)};
  };
  return mds_dataset<Schema>(std::move(shards), index_url, std::move(open), o.mds);
}

}  // namespace sluice::io
