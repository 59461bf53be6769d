// sluice-pack — converts an ImageFolder tree, WebDataset tar shards, TFRecord files, a .npy
// array or IDX files (the MNIST family, plain or .gz) into one sluice shard (io/shard.hpp), then re-opens the shard and verifies it.
//
// Records are stored as they are (JPEG bytes stay JPEG: decoding happens in the pipeline), each
// with its label. The shard is written to "<out>.partial" and renamed when complete, so a killed
// or failed pack never leaves a half shard under the output name (SIGINT/SIGTERM also remove the
// partial file). Run `sluice-pack --help` for the whole story.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#if SLUICE_WITH_ZLIB
#include "sluice/io/idx.hpp"
#endif
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tfrecord.hpp"
#include "sluice/io/wds_tar.hpp"
#if SLUICE_WITH_TURBOJPEG
#include "sluice/codec/jpeg.hpp"
#endif

namespace fs = std::filesystem;

namespace {

constexpr const char* help_text = R"(usage: sluice-pack <kind> <input...> -o <out.sluice> [options]

Packs records into one sluice shard (an indexed, checksummed, mmap-friendly file that
sluice::io::shard_reader reads with zero copy). Records keep their bytes (JPEGs stay encoded).

kinds:
  imagefolder DIR     DIR/<class>/<image>: one subfolder per class; the class index is the
                      position of the folder in sorted (byte-wise) order. Files ending in .jpg,
                      .jpeg (any case) are packed, in sorted order within each class; other files
                      are skipped and counted. Each JPEG's header is checked while packing
                      (--no-jpeg-check to skip). The class names are written, one a line in
                      index order, to <out>.classes.
  wds SHARD.tar...    WebDataset tar shards, in the order given. --field names the member
                      extension that is the record (default jpg), --label the extension of the
                      ASCII-integer label member (default cls; --label '' for none: label -1).
  tfrecord FILE...    TFRecord files; CRCs are checked; labels are -1.
  npy X.npy           rows of the first axis of X; --labels Y.npy gives a 1-D integer array with
                      one label per row.
  idx IMAGES [LABELS] IDX files (MNIST, Fashion-MNIST, ...; plain or gzip-compressed .gz): one
                      record per image (its raw bytes, e.g. 28x28 uint8), labels from the
                      labels file when given, else -1.

options:
  -o, --out PATH      the shard to write (required). Written as PATH.partial, renamed when done.
  --field EXT         wds: record field (default jpg)
  --label EXT         wds: label field (default cls; empty for none)
  --labels Y.npy      npy: labels
  --no-checksums      do not store per-record CRC-32C in the shard
  --no-jpeg-check     imagefolder: do not check JPEG headers
  --no-verify         skip re-opening and checking the finished shard
  -q, --quiet         no progress output
  -h, --help          this text

Progress goes to stderr: a bar with rate and ETA on a terminal, plain lines otherwise.
After writing, the shard is re-opened and checked: record count, every record's CRC-32C against
the CRC computed from the input while packing, and every label. Exit status: 0 success,
1 bad input or failed verification (nothing is left under the output name), 2 usage error.
)";

std::atomic<bool> interrupted{false};
void on_signal(int) { interrupted.store(true); }

struct options {
  std::string kind, out, field = "jpg", label = "cls", labels_npy;
  std::vector<std::string> inputs;
  bool checksums = true, jpeg_check = true, verify = true, quiet = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "sluice-pack: %s (try --help)\n", why.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") { std::fputs(help_text, stdout); std::exit(0); }
    else if (a == "-o" || a == "--out") o.out = next();
    else if (a == "--field") o.field = next();
    else if (a == "--label") o.label = next();
    else if (a == "--labels") o.labels_npy = next();
    else if (a == "--no-checksums") o.checksums = false;
    else if (a == "--no-jpeg-check") o.jpeg_check = false;
    else if (a == "--no-verify") o.verify = false;
    else if (a == "-q" || a == "--quiet") o.quiet = true;
    else if (!a.empty() && a[0] == '-') usage("unknown option " + a);
    else if (o.kind.empty()) o.kind = a;
    else o.inputs.push_back(a);
  }
  if (o.kind.empty()) usage("no kind given (imagefolder, wds, tfrecord, npy, idx)");
  if (o.inputs.empty()) usage("no input given");
  if (o.out.empty()) usage("no output given (-o out.sluice)");
  if (o.kind == "npy" && o.inputs.size() != 1) usage("npy takes exactly one array");
  if (o.kind == "imagefolder" && o.inputs.size() != 1) usage("imagefolder takes exactly one directory");
  if (o.kind == "idx" && o.inputs.size() > 2) usage("idx takes an images file and optionally a labels file");
  return o;
}

// A progress line: a bar with rate and ETA on a terminal, a plain line every few seconds otherwise.
class progress {
 public:
  progress(std::uint64_t total, bool quiet) : total_(total), quiet_(quiet), tty_(::isatty(2) != 0) {}
  void update(std::uint64_t done, std::uint64_t bytes) {
    if (quiet_) return;
    const auto now = clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (done != total_ && since < (tty_ ? 0.1 : 5.0)) return;
    last_ = now;
    const double t = std::chrono::duration<double>(now - start_).count();
    const double rate = t > 0 ? done / t : 0, mbs = t > 0 ? bytes / t / 1e6 : 0;
    const double eta = rate > 0 && total_ >= done ? (total_ - done) / rate : 0;
    const double frac = total_ ? static_cast<double>(done) / total_ : 1.0;
    if (tty_) {
      char bar[31];
      const int fill = static_cast<int>(frac * 30);
      for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '.';
      bar[30] = '\0';
      std::fprintf(stderr, "\r[%s] %5.1f%% %llu/%llu  %.0f rec/s  %.1f MB/s  ETA %.0fs   ", bar, 100 * frac,
                   (unsigned long long)done, (unsigned long long)total_, rate, mbs, eta);
      if (done == total_) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "sluice-pack: %llu/%llu records (%.1f%%), %.0f rec/s, %.1f MB/s, ETA %.0fs\n",
                   (unsigned long long)done, (unsigned long long)total_, 100 * frac, rate, mbs, eta);
    }
  }

 private:
  using clock = std::chrono::steady_clock;
  std::uint64_t total_;
  bool quiet_, tty_;
  clock::time_point start_ = clock::now(), last_ = clock::time_point{};
};

std::vector<std::byte> read_whole(const fs::path& p) {
  sluice::io::mapped_file f(p.string());
  return {f.bytes().begin(), f.bytes().end()};
}

bool is_jpeg_name(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e == ".jpg" || e == ".jpeg";
}

struct packed {
  std::vector<std::uint32_t> crcs;
  std::vector<std::int64_t> labels;
  std::uint64_t bytes = 0;
};

// Adds a record to the shard and remembers what verification must find.
void add(sluice::io::shard_writer& w, packed& p, std::span<const std::byte> rec, std::int64_t label) {
  if (interrupted.load()) throw sluice::usage_error("interrupted");
  w.add(rec, label);
  p.crcs.push_back(sluice::io::crc32c(rec));
  p.labels.push_back(label);
  p.bytes += rec.size();
}

packed pack_imagefolder(const options& o, sluice::io::shard_writer& w) {
  const fs::path root = o.inputs[0];
  if (!fs::is_directory(root)) throw sluice::io_error(root.string(), "not a directory");
  std::vector<std::string> classes;
  for (const auto& d : fs::directory_iterator(root))
    if (d.is_directory()) classes.push_back(d.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw sluice::format_error(root.string(), {}, "no class subfolders (expected DIR/<class>/<image>.jpg)");
  std::vector<std::pair<fs::path, std::int64_t>> files;
  std::uint64_t skipped = 0;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    std::vector<fs::path> in_class;
    for (const auto& f : fs::recursive_directory_iterator(root / classes[c]))
      if (f.is_regular_file()) {
        if (is_jpeg_name(f.path())) in_class.push_back(f.path());
        else ++skipped;
      }
    std::sort(in_class.begin(), in_class.end());
    for (auto& f : in_class) files.emplace_back(std::move(f), static_cast<std::int64_t>(c));
  }
  if (!o.quiet)
    std::fprintf(stderr, "sluice-pack: %zu classes, %zu JPEG files%s\n", classes.size(), files.size(),
                 skipped ? (", " + std::to_string(skipped) + " other files skipped").c_str() : "");
  packed p;
  progress bar(files.size(), o.quiet);
  for (const auto& [path, label] : files) {
    auto bytes = read_whole(path);
#if SLUICE_WITH_TURBOJPEG
    if (o.jpeg_check) {
      try {
        (void)sluice::codecs::read_jpeg_header(bytes);
      } catch (const sluice::format_error& e) {
        throw sluice::format_error(path.string(), {}, e.cause());
      }
    }
#endif
    add(w, p, bytes, label);
    bar.update(p.labels.size(), p.bytes);
  }
  std::ofstream names(o.out + ".classes");
  for (const auto& c : classes) names << c << '\n';
  return p;
}

template <class Reader, class MakeReader>
packed pack_readers(const options& o, sluice::io::shard_writer& w, MakeReader make) {
  std::vector<Reader> readers;
  std::uint64_t total = 0;
  for (const auto& in : o.inputs) {
    readers.push_back(make(in));
    total += readers.back().size();
  }
  packed p;
  progress bar(total, o.quiet);
  for (const auto& r : readers)
    for (std::size_t i = 0; i < r.size(); ++i) {
      add(w, p, r.record(i), r.label(i));
      bar.update(p.labels.size(), p.bytes);
    }
  return p;
}

void verify(const options& o, const packed& p) {
  sluice::io::shard_reader r(o.out, {.verify = false});
  if (r.size() != p.crcs.size())
    throw sluice::format_error(o.out, {}, "verification: " + std::to_string(r.size()) + " records, expected " +
                                              std::to_string(p.crcs.size()));
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (sluice::io::crc32c(r.record(i)) != p.crcs[i])
      throw sluice::format_error(o.out, {.record = i}, "verification: record bytes differ from the input");
    if (r.label(i) != p.labels[i]) throw sluice::format_error(o.out, {.record = i}, "verification: label differs");
  }
  if (r.has_checksums()) (void)r.verify_all();
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  bool finished = false;
  try {
    packed p;
    {
      sluice::io::shard_writer w(o.out, {.checksums = o.checksums});
      if (o.kind == "imagefolder") {
        p = pack_imagefolder(o, w);
      } else if (o.kind == "wds") {
        p = pack_readers<sluice::io::wds_tar_reader>(o, w, [&](const std::string& in) {
          return sluice::io::wds_tar_reader(in, {.record_field = o.field, .label_field = o.label,
                                                 .index = sluice::io::saved_index::ignore});
        });
      } else if (o.kind == "tfrecord") {
        p = pack_readers<sluice::io::tfrecord_reader>(o, w, [&](const std::string& in) {
          return sluice::io::tfrecord_reader(in, {.index = sluice::io::saved_index::ignore});
        });
      } else if (o.kind == "npy") {
        p = pack_readers<sluice::io::npy_reader>(o, w, [&](const std::string& in) {
          return sluice::io::npy_reader(in, {.labels_path = o.labels_npy});
        });
      } else if (o.kind == "idx") {
#if SLUICE_WITH_ZLIB
        sluice::io::idx_reader r(o.inputs[0], o.inputs.size() > 1 ? o.inputs[1] : std::string());
        progress bar(r.size(), o.quiet);
        for (std::size_t i = 0; i < r.size(); ++i) {
          add(w, p, r.record(i), r.label(i));
          bar.update(p.labels.size(), p.bytes);
        }
#else
        usage("this sluice-pack was built without zlib: the idx kind needs sluice::zlib");
#endif
      } else {
        usage("unknown kind '" + o.kind + "'");
      }
      w.finish();
      finished = true;
    }
    if (o.verify) verify(o, p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.quiet)
      std::fprintf(stderr, "sluice-pack: wrote %s: %zu records, %.1f MB in %.2f s%s\n", o.out.c_str(), p.crcs.size(),
                   p.bytes / 1e6, s, o.verify ? ", verified" : "");
    return 0;
  } catch (const std::exception& e) {
    if (finished) std::remove(o.out.c_str());  // a shard that failed verification is not left behind
    std::fprintf(stderr, "sluice-pack: %s\n", interrupted.load() ? "interrupted; no shard written" : e.what());
    return 1;
  }
}
