// sluice-pack — converts an ImageFolder tree, WebDataset tar shards, TFRecord files, a .npy
// array or IDX files (the MNIST family, plain or .gz) into one sluice shard (io/shard.hpp), then
// re-opens the shard and verifies it.
//
// Records are stored as they are (JPEG bytes stay JPEG: decoding happens in the pipeline), each
// with its label; ImageFolder class names go inside the shard (shard_reader::class_names()).
// With --fields (wds) or --features (tfrecord of tf.train.Example) each record holds several
// fields and the shard carries their schema (format version 3, io/shard_fields.hpp reads it); so
// does an .npy array other than uint8 rows, whose dtype and row shape the schema keeps.
//
// Never a bad file under the output name: the shard is written to "<out>.partial", fsynced,
// re-opened and verified there, and only then renamed to <out> (and the directory fsynced). A
// failure at any step removes the partial file. SIGINT, SIGTERM and SIGHUP are handled at every
// phase by a handler that unlinks the partial files (unlink is async-signal-safe) and exits with
// 128 + the signal number; SIGKILL leaves at most "<out>.partial", never an unverified <out>.
// Run `sluice-pack --help` for options and exit codes.
//
// Test hook: SLUICE_PACK_TEST_PAUSE_AT=<phase> (read, write, sealed, verify, commit) makes the
// tool print "sluice-pack: test hook: paused at <phase>" to stderr and wait there for a signal,
// so tests can interrupt each phase deterministically (tests/faults/pack_test.cpp); SIGUSR1 lets
// it go on (a test changes an input while the tool has it mapped).
#include <signal.h>
#include <csignal>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#if SLUICE_WITH_ZLIB
#include "sluice/io/idx.hpp"
#endif
#include "sluice/io/npy.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/io/tf_example.hpp"
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
                      .jpeg (any case) are packed, in sorted order within each class; another
                      image (.png, .bmp, .webp, ...: torchvision reads them) is bad input unless
                      --skip-non-jpeg; other files are skipped and counted. Each JPEG is
                      checked while packing (--no-jpeg-check to skip): not empty, JPEG data
                      (not PNG, not a macOS ._ AppleDouble file),
                      a readable header; with --verify full also decoded in full. The class names
                      are stored inside the shard (shard_reader::class_names()). A class folder
                      with no JPEG in it is bad input naming it, as torchvision's ImageFolder
                      refuses one: it would still take a class index and shift the ones after it
                      (--allow-empty-classes keeps it, with no samples).
  wds SHARD.tar...    WebDataset tar shards, in the order given. --field names the member
                      extension that is the record (default jpg), --label the extension of the
                      ASCII-integer label member (default cls; --label '' for none: label -1).
                      A zero block followed by more members (two archives joined with cat) is an
                      error naming the offset unless --ignore-zeros is given.
  tfrecord FILE...    TFRecord files; CRCs are checked; labels are -1 (without --features).
  npy X.npy           rows of the first axis of X; --labels Y.npy gives a 1-D integer array with
                      one label per row. A uint8 array of two or more dimensions is packed as
                      single records, each row's bytes (images, pixel rows: read flat, or with
                      shape=). Any other array (float32, float16, int64, bool, ...; a 1-D array)
                      keeps its dtype and row shape: a shard with fields (see below) whose field
                      'data' is fixed at the row's shape ([] for a 1-D array), with --labels also
                      a field 'label' (i64); sluice.shard(OUT) gives the array's rows back as
                      they were. Complex, string and void arrays, and rows of no elements (shape
                      (N, 0)), are bad input naming the file.
  idx IMAGES [LABELS] IDX files (MNIST, Fashion-MNIST, ...; plain or gzip-compressed .gz): one
                      record per image (its raw bytes, e.g. 28x28 uint8), labels from the
                      labels file when given, else -1.

shards with fields (format version 3, read with sluice::io::shard_fields<Schema>): each record
holds several named fields, described by a schema stored in the shard (name, dtype, fixed or
variable shape). A field list is name[:type[:count]],... where type is bytes (the default, =u8),
int64 (=i64), float (=f32) or a sluice dtype (u8 i8 u16 i16 i32 u32 i64 u64 f16 bf16 f32 f64
bool); with a count the field is fixed at that many elements, without one it is variable.
  wds ... --fields jpg,json,boxes.bin:f32
                      each listed member extension of a sample becomes a field, its bytes as
                      they are (a non-u8 type takes them as raw little-endian elements: the size
                      must be whole elements). A sample missing a field is bad input naming
                      the file, the sample and the field. --label as for wds. Extensions
                      match in any case, as WebDataset's reader lower-cases them (a.JPG is jpg).
  tfrecord ... --features image/encoded:bytes,image/class/label:int64:1,bbox/xmin:float
                      tf.train.Example records: each listed feature becomes a field (a
                      bytes_list holds one value: several are bad input, their
                      boundaries would be lost; int64_list values range-checked into
                      the type; float_list as f32 or f64). --label NAME takes the record's
                      label from an int64 feature holding exactly one value (it may also be a
                      field); without it labels are -1.
Verification of a shard with fields re-opens it and checks its schema, every record's field
table, every field's bytes against the input's CRC-32C and every label; --verify full also
decodes every field that holds a JPEG.

options:
  -o, --out PATH      the shard to write (required; not one of the inputs). Written as
                      PATH.partial, fsynced, verified, then renamed to PATH. No records at all
                      (an empty folder, every input bad) is an error: no empty shard is written.
  --field EXT         wds: record field (default jpg)
  --fields LIST       wds: pack these member extensions as the fields of a shard with fields
  --features LIST     tfrecord: pack these tf.train.Example features as fields (see above)
  --label EXT         wds: label field (default cls; empty for none); tfrecord with
                      --features: the int64 feature holding the label
  --ignore-zeros      wds: read through all-zero blocks (concatenated archives), as GNU tar does
  --labels Y.npy      npy: labels
  --verify MODE       how the finished PATH.partial is checked before it is renamed:
                        crc   (default) record count, every record's CRC-32C against the CRC of
                              the input bytes, every label, the class names
                        full  crc, and every JPEG record decoded in full with TurboJPEG (a
                              truncated or corrupt JPEG fails); every input's JPEG records
                              (files, tar members, TFRecord records, fields) are also decoded
                              while packing, so --skip-bad can skip them
                        none  no check (the same as --no-verify)
  --skip-bad          a bad input (unreadable, empty, not JPEG, bad header, failed decode, not a
                      regular file; for wds/tfrecord a file that does not open, or a bad record or
                      member inside one) is skipped instead of ending the pack; each is listed as
                      "path<TAB>reason" in PATH.skipped.tsv (a tar member as "in.tar member
                      'NAME'") and their count is printed. Without it the first bad input ends the
                      pack, naming the file, the member and the cause.
  --allow-empty-classes  imagefolder: keep a class folder with no JPEG in it (its index, no samples)
  --skip-non-jpeg     imagefolder: pack the JPEGs and leave out other images (.png, .bmp, .webp,
                      ...), counted; without it such an image is bad input naming it
  --no-checksums      do not store per-record CRC-32C in the shard
  --no-jpeg-check     imagefolder: do not check the JPEGs
  --no-verify         --verify none
  -q, --quiet         no progress output
  -h, --help          this text

Progress goes to stderr: a bar with rate and ETA on a terminal, plain lines otherwise.
Nothing is ever left under PATH unless it was written completely and verified: a failure or a
signal removes PATH.partial; SIGKILL or a power cut can leave PATH.partial, never a bad PATH.
A pack that succeeds removes a PATH.skipped.tsv or PATH.classes left by an earlier run.

exit status:
  0        the shard was written and verified
  1        bad input (named, with the cause) or verification failed; nothing written
  2        usage error (unknown kind or option, missing value, -o names an input); nothing written
  3        I/O error writing the output (disk full, permission, rename failed); nothing written
  128+N    killed by signal N that sluice-pack handles (129 SIGHUP, 130 SIGINT, 143 SIGTERM);
           the partial files are removed, nothing written (if the signal came after the rename,
           PATH is complete and verified, and the message says so)
)";

constexpr int exit_ok = 0, exit_bad_input = 1, exit_usage = 2, exit_io = 3;

// ---- signals: every phase, no polling ----------------------------------------------------------
// The handler removes the partial files named here and _exits. The names are written with the
// signals blocked, so the handler never sees half a name. The signal may run the handler on any
// thread (the library's threads, the page warmer's, do not block it), also while the main thread
// renames the shard into place: commit_state decides, by compare-and-swap, which of the two ends
// the run, so the message and the exit status always say what is on disk.
constexpr int n_partials = 2;
char partial_names[n_partials][PATH_MAX + 64];
enum commit_step : int { running = 0, committing = 1, committed = 2, ending = 3 };
std::atomic<int> commit_state{running};
std::atomic<int> pending_signal{0};  // a signal that came while the main thread renamed
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
constexpr int handled_signals[] = {SIGINT, SIGTERM, SIGHUP};

void say(const char* s) {
  ssize_t r = ::write(2, s, std::strlen(s));
  (void)r;
}
extern "C" void on_signal(int sig) {
  pending_signal.store(sig);  // before the swap: the main thread reads it after its own
  int step = running;
  if (!commit_state.compare_exchange_strong(step, ending)) {
    if (step == committing) return;  // the main thread finishes the rename, then reports the signal
    if (step == ending)              // a handler on another thread is ending the run
      for (;;) ::pause();
  }
  for (auto& n : partial_names)
    if (n[0] != '\0') ::unlink(n);
  say(step == committed ? "sluice-pack: interrupted after the shard was renamed into place; it is complete and verified\n"
                        : "sluice-pack: interrupted; partial files removed, no shard written\n");
  ::_exit(128 + sig);
}

class signals_blocked {
 public:
  signals_blocked() {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : handled_signals) sigaddset(&s, sig);
    ::sigprocmask(SIG_BLOCK, &s, &old_);
  }
  ~signals_blocked() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
  signals_blocked(const signals_blocked&) = delete;
  signals_blocked& operator=(const signals_blocked&) = delete;

 private:
  sigset_t old_;
};

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigfillset(&sa.sa_mask);  // one handler at a time
  for (int sig : handled_signals) ::sigaction(sig, &sa, nullptr);
  // The test hook's SIGUSR1 blocked before any thread starts, so every thread sluice starts (the
  // page warmer) inherits the block and the signal reaches the main thread in phase()'s
  // sigsuspend only: delivered to another thread, its handler raced the main thread's read
  // (ThreadSanitizer saw it) and the main thread slept on.
  if (std::getenv("SLUICE_PACK_TEST_PAUSE_AT") != nullptr) {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    ::pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  }
}

void set_partial_name(int slot, const std::string& path) {
  signals_blocked b;
  const std::size_t n = std::min(path.size(), sizeof partial_names[slot] - 1);
  std::memcpy(partial_names[slot], path.data(), n);
  partial_names[slot][n] = '\0';
}
void clear_partial_name(int slot) {
  signals_blocked b;
  partial_names[slot][0] = '\0';
}

// The test hook (see the top of this file).
volatile std::sig_atomic_t resume_requested = 0;
extern "C" void on_resume_signal(int) { resume_requested = 1; }

void phase(const char* name) {
  static const char* at = std::getenv("SLUICE_PACK_TEST_PAUSE_AT");
  if (at == nullptr || std::strcmp(at, name) != 0) return;
  // Waits for a signal: INT/TERM/HUP end the pack as always, SIGUSR1 lets it go on (so a test can
  // change an input while it is mapped). SIGUSR1 stays blocked except inside sigsuspend: no race.
  struct sigaction sa {};
  sa.sa_handler = on_resume_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, &old);
  std::fprintf(stderr, "sluice-pack: test hook: paused at %s\n", name);
  std::fflush(stderr);
  sigset_t wait = old;
  sigdelset(&wait, SIGUSR1);
  while (resume_requested == 0) ::sigsuspend(&wait);
  resume_requested = 0;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

// ---- errors -------------------------------------------------------------------------------------
// An input that cannot be packed (exit 1); caught per file by --skip-bad.
struct input_error : sluice::error {
  input_error(std::string file, std::string reason)
      : sluice::error("sluice-pack: bad input '" + file + "': " + reason), file(std::move(file)), reason(std::move(reason)) {}
  std::string file, reason;
};
// The written shard is not what was packed (exit 1).
struct verify_error : sluice::error {
  using sluice::error::error;
};

enum class verify_mode { none, crc, full };

struct options {
  std::string kind, out, field = "jpg", label = "cls", labels_npy;
  bool label_given = false;
  std::vector<std::string> inputs;
  // --fields (wds) / --features (tfrecord): a shard with fields (format version 3).
  std::vector<sluice::io::shard_schema_field> fields;
  bool field_given = false;
  bool checksums = true, jpeg_check = true, quiet = false, skip_bad = false, ignore_zeros = false;
  bool allow_empty_classes = false;
  bool skip_non_jpeg = false;
  verify_mode verify = verify_mode::crc;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "sluice-pack: %s (try --help)\n", why.c_str());
  std::exit(exit_usage);
}

// The same file: equal after resolving symlinks, "." and "..", or (hard links) the same inode.
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ea, eb;
  const auto ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  if (!ea && !eb && ca == cb) return true;
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);  // an error (either missing) means not the same
  return !ec && same;
}

// A field type on the command line: a sluice dtype name, or bytes / int64 / float.
bool parse_dtype(const std::string& t, sluice::dtype& out) {
  if (t == "bytes") { out = sluice::dtype::u8; return true; }
  if (t == "int64") { out = sluice::dtype::i64; return true; }
  if (t == "float") { out = sluice::dtype::f32; return true; }
  for (unsigned k = 0; k <= static_cast<unsigned>(sluice::dtype::boolean); ++k)
    if (t == sluice::dtype_name(static_cast<sluice::dtype>(k))) {
      out = static_cast<sluice::dtype>(k);
      return true;
    }
  return false;
}

// "name[:type[:count]],..." -> the shard's fields (variable unless a count is given).
std::vector<sluice::io::shard_schema_field> parse_field_list(const std::string& flag, const std::string& list, bool tf) {
  std::vector<sluice::io::shard_schema_field> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    at = comma + 1;
    std::vector<std::string> parts;
    for (std::size_t q = 0;;) {
      const std::size_t colon = item.find(':', q);
      parts.push_back(item.substr(q, colon == std::string::npos ? std::string::npos : colon - q));
      if (colon == std::string::npos) break;
      q = colon + 1;
    }
    if (parts[0].empty()) usage(flag + ": an empty field name in '" + list + "'");
    if (parts.size() > 3) usage(flag + ": '" + item + "' is not name[:type[:count]]");
    sluice::io::shard_schema_field f{parts[0], sluice::dtype::u8, sluice::extent::variable, {-1}};
    if (parts.size() > 1 && !parse_dtype(parts[1], f.type))
      usage(flag + ": '" + parts[1] + "' is not a type (bytes, int64, float, or a sluice dtype: u8 i8 u16 i16 i32 "
            "u32 i64 u64 f16 bf16 f32 f64 bool)");
    if (tf && (f.type == sluice::dtype::f16 || f.type == sluice::dtype::bf16))
      usage(flag + ": a tf.train.Example feature cannot be " + std::string(sluice::dtype_name(f.type)) +
            " (it holds bytes, int64 or float lists)");
    if (parts.size() > 2) {
      char* end = nullptr;
      errno = 0;
      const unsigned long long n = std::strtoull(parts[2].c_str(), &end, 10);
      if (parts[2].empty() || *end != '\0' || errno != 0 || parts[2][0] == '-' || n > 0xffffffffull)
        usage(flag + ": '" + parts[2] + "' is not a count of elements");
      f.kind = sluice::extent::fixed;
      f.shape = {static_cast<std::int64_t>(n)};
    }
    for (const auto& g : out)
      if (g.name == f.name) usage(flag + ": '" + f.name + "' named twice");
    out.push_back(std::move(f));
    if (comma == list.size()) break;
  }
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") { std::fputs(help_text, stdout); std::exit(exit_ok); }
    else if (a == "-o" || a == "--out") o.out = next();
    else if (a == "--field") { o.field = next(); o.field_given = true; }
    else if (a == "--fields") o.fields = parse_field_list(a, next(), false);
    else if (a == "--features") o.fields = parse_field_list(a, next(), true);
    else if (a == "--label") { o.label = next(); o.label_given = true; }
    else if (a == "--labels") o.labels_npy = next();
    else if (a == "--no-checksums") o.checksums = false;
    else if (a == "--no-jpeg-check") o.jpeg_check = false;
    else if (a == "--no-verify") o.verify = verify_mode::none;
    else if (a == "--verify") {
      const std::string m = next();
      if (m == "none") o.verify = verify_mode::none;
      else if (m == "crc") o.verify = verify_mode::crc;
      else if (m == "full") o.verify = verify_mode::full;
      else usage("--verify takes none, crc or full, not '" + m + "'");
    }
    else if (a == "--skip-bad") o.skip_bad = true;
    else if (a == "--allow-empty-classes") o.allow_empty_classes = true;
    else if (a == "--skip-non-jpeg") o.skip_non_jpeg = true;
    else if (a == "--ignore-zeros") o.ignore_zeros = true;
    else if (a == "-q" || a == "--quiet") o.quiet = true;
    else if (!a.empty() && a[0] == '-') usage("unknown option " + a);
    else if (o.kind.empty()) o.kind = a;
    else o.inputs.push_back(a);
  }
  if (o.kind.empty()) usage("no kind given (imagefolder, wds, tfrecord, npy, idx)");
  if (o.kind != "imagefolder" && o.kind != "wds" && o.kind != "tfrecord" && o.kind != "npy" && o.kind != "idx")
    usage("unknown kind '" + o.kind + "' (imagefolder, wds, tfrecord, npy, idx)");
#if !SLUICE_WITH_ZLIB
  if (o.kind == "idx") usage("this sluice-pack was built without zlib: the idx kind needs sluice::zlib");
#endif
#if !SLUICE_WITH_TURBOJPEG
  if (o.verify == verify_mode::full) usage("this sluice-pack was built without TurboJPEG: --verify full needs sluice::jpeg");
#endif
  if (o.inputs.empty()) usage("no input given");
  if (o.out.empty()) usage("no output given (-o out.sluice)");
  if (o.kind == "npy" && o.inputs.size() != 1) usage("npy takes exactly one array");
  if (o.kind == "imagefolder" && o.inputs.size() != 1) usage("imagefolder takes exactly one directory");
  if (o.kind == "idx" && o.inputs.size() > 2) usage("idx takes an images file and optionally a labels file");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fields" && o.kind != "wds") usage("--fields is for wds (tfrecord takes --features)");
    if (a == "--features" && o.kind != "tfrecord") usage("--features is for tfrecord (wds takes --fields)");
  }
  if (!o.fields.empty() && o.field_given) usage("--field (one record) and --fields (a shard with fields) exclude each other");
  // Before --features, tfrecord ignored --label; it still does there (same exit status), but says so.
  if (o.kind == "tfrecord" && o.label_given && o.fields.empty() && !o.quiet)
    std::fprintf(stderr, "sluice-pack: --label is ignored for tfrecord without --features (labels are -1)\n");
  // The output (and its partial file) must not be an input: packing would truncate what it reads.
  std::vector<std::string> all = o.inputs;
  if (!o.labels_npy.empty()) all.push_back(o.labels_npy);
  for (const auto& in : all)
    for (const std::string& out : {o.out, o.out + ".partial"})
      if (same_file(out, in))
        usage("the output '" + out + "' is the input '" + in + "' (the same file): packing would overwrite it; "
              "choose another -o");
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

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool is_jpeg_name(const fs::path& p) {
  const std::string e = lower_extension(p);
  return e == ".jpg" || e == ".jpeg";
}

// The other extensions torchvision's ImageFolder reads (its IMG_EXTENSIONS), in any case.
bool is_other_image_name(const fs::path& p) {
  if (p.filename().string().rfind("._", 0) == 0) return false;  // macOS AppleDouble metadata
  const std::string e = lower_extension(p);
  for (const char* x : {".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (e == x) return true;
  return false;
}

bool starts_with(std::span<const std::byte> b, std::initializer_list<unsigned> magic) {
  if (b.size() < magic.size()) return false;
  std::size_t i = 0;
  for (unsigned m : magic)
    if (std::to_integer<unsigned>(b[i++]) != m) return false;
  return true;
}
bool looks_like_jpeg(std::span<const std::byte> b) { return starts_with(b, {0xff, 0xd8, 0xff}); }

// Decodes a JPEG in full (at its own size); throws format_error naming the cause. TurboJPEG's
// warnings ("premature end of data", a truncated file) count as errors.
void decode_fully(std::span<const std::byte> b) {
#if SLUICE_WITH_TURBOJPEG
  const auto hd = sluice::codecs::read_jpeg_header(b);
  // Output at the image's own size, no DCT scaling: every coefficient is decoded.
  const sluice::codecs::jpeg dec{{.width = hd.width, .height = hd.height}, {.dct_scaling = false}};
  thread_local std::vector<std::byte> out;
  out.resize(dec.output_bytes());
  dec.decode(b, out, {});
#else
  (void)b;
#endif
}

// Opens an input file without blocking: a FIFO or a device is refused, named, before any open.
void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw input_error(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw input_error(path, "not a regular file");
}

// One ImageFolder file, read and checked; throws input_error with the reason.
sluice::io::mapped_file read_image(const fs::path& path, const options& o) {
  const std::string p = path.string();
  require_regular_file(p);
  std::optional<sluice::io::mapped_file> f;
  try {
    f.emplace(p);
  } catch (const sluice::io_error& e) {
    throw input_error(p, e.what());
  }
  const auto b = f->bytes();
  if (b.empty()) throw input_error(p, "empty file (0 bytes)");
  if (!o.jpeg_check) return std::move(*f);
  if (starts_with(b, {0x00, 0x05, 0x16, 0x07}))
    throw input_error(p, "macOS AppleDouble metadata (a ._ file), not an image");
  if (starts_with(b, {0x89, 'P', 'N', 'G'})) throw input_error(p, "PNG data in a file named as a JPEG");
  if (!looks_like_jpeg(b)) throw input_error(p, "not JPEG data (no start-of-image marker)");
#if SLUICE_WITH_TURBOJPEG
  try {
    if (o.verify == verify_mode::full) decode_fully(b);
    else (void)sluice::codecs::read_jpeg_header(b);
  } catch (const sluice::format_error& e) {  // e.g. a record over the shard format's 4 GiB limit
    throw input_error(p, e.cause());
  }
#endif
  return std::move(*f);
}

// A file created as "<final>.partial" and renamed by commit(); removed if never committed.
class partial_text_file {
 public:
  partial_text_file(std::string final_path, int slot) : final_(std::move(final_path)), partial_(final_ + ".partial"), slot_(slot) {
    set_partial_name(slot_, partial_);
    out_.open(partial_, std::ios::binary | std::ios::trunc);
    if (!out_) {
      clear_partial_name(slot_);
      throw sluice::io_error(partial_, "cannot create", errno);
    }
  }
  ~partial_text_file() {
    if (!committed_) {
      out_.close();
      std::remove(partial_.c_str());
      clear_partial_name(slot_);
    }
  }
  partial_text_file(const partial_text_file&) = delete;
  partial_text_file& operator=(const partial_text_file&) = delete;
  std::ofstream& stream() { return out_; }
  void seal() {
    out_.flush();
    out_.close();
    if (out_.fail()) throw sluice::io_error(partial_, "cannot write");
  }
  void commit() {
    std::error_code ec;
    fs::rename(partial_, final_, ec);
    if (ec) throw sluice::io_error(final_, "cannot rename '" + partial_ + "' to", ec.value());
    committed_ = true;
    clear_partial_name(slot_);
  }

 private:
  std::string final_, partial_;
  int slot_;
  std::ofstream out_;
  bool committed_ = false;
};

std::string tsv_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\t') r += "\\t";
    else if (c == '\n') r += "\\n";
    else if (c == '\\') r += "\\\\";
    else r += c;
  }
  return r;
}

struct packed {
  std::vector<std::uint32_t> crcs;        // per record (a shard without fields)
  std::vector<sluice::io::shard_schema_field> schema;  // a shard with fields: its schema
  std::vector<std::uint32_t> field_crcs;  // ... and per record, per field, the input bytes' CRC
  std::vector<std::int64_t> labels;
  std::vector<std::string> class_names;
  std::vector<std::pair<std::string, std::string>> skipped;  // path, reason
  std::uint64_t bytes = 0;
  // Where each record came from, so that verification names the input, not the partial file:
  // inputs[from_input[i]] and the record's index in it (a tar's member is found again by it).
  std::vector<std::string> inputs;
  std::vector<std::uint32_t> from_input;
  std::vector<std::uint64_t> from_record;
  void source(std::string_view input, std::uint64_t record) {
    if (inputs.empty() || inputs.back() != input) inputs.emplace_back(input);
    from_input.push_back(static_cast<std::uint32_t>(inputs.size() - 1));
    from_record.push_back(record);
  }
};

// Adds a record to the shard and remembers what verification must find.
void add(sluice::io::shard_writer& w, packed& p, std::span<const std::byte> rec, std::int64_t label) {
  w.add(rec, label);
  p.crcs.push_back(sluice::io::crc32c(rec));
  p.labels.push_back(label);
  p.bytes += rec.size();
  if (p.labels.size() == 1) phase("write");
}
void add_fields(sluice::io::shard_writer& w, packed& p, std::span<const std::span<const std::byte>> fields, std::int64_t label) {
  w.add_fields(fields, label);
  for (const auto& f : fields) {
    p.field_crcs.push_back(sluice::io::crc32c(f));
    p.bytes += f.size();
  }
  p.labels.push_back(label);
  if (p.labels.size() == 1) phase("write");
}

void pack_imagefolder(const options& o, sluice::io::shard_writer& w, packed& p) {
  const fs::path root = o.inputs[0];
  std::vector<std::string> classes;
  std::vector<std::pair<fs::path, std::int64_t>> files;
  std::uint64_t other = 0, other_images = 0;
  fs::path first_other_image;
  try {
    if (!fs::is_directory(root)) throw input_error(root.string(), "not a directory");
    for (const auto& d : fs::directory_iterator(root)) {
      if (d.is_directory()) classes.push_back(d.path().filename().string());
      else ++other;  // a file beside the class folders: in no class, counted
    }
    std::sort(classes.begin(), classes.end());
    if (classes.empty()) throw input_error(root.string(), "no class subfolders (expected DIR/<class>/<image>.jpg)");
    for (std::size_t c = 0; c < classes.size(); ++c) {
      std::vector<fs::path> in_class;
      for (const auto& f : fs::recursive_directory_iterator(root / classes[c])) {
        if (f.is_directory()) continue;
        // Named as a JPEG: packed (or refused, a FIFO included, with its reason). Else counted.
        if (is_jpeg_name(f.path())) {
          in_class.push_back(f.path());
        } else {
          ++other;
          // An image torchvision's ImageFolder would take: left out only when asked.
          if (is_other_image_name(f.path()) && other_images++ == 0) first_other_image = f.path();
        }
      }
      std::sort(in_class.begin(), in_class.end());
      if (other_images > 0 && !o.skip_non_jpeg)
        throw input_error(first_other_image.string(),
                          "an image that is not named as a JPEG; imagefolder packs JPEG files only (shards are "
                          "decoded as JPEG), while torchvision's ImageFolder would read this one: convert it to "
                          "JPEG, or pass --skip-non-jpeg to pack the JPEGs and leave such images out (counted)");
      if (in_class.empty() && !o.allow_empty_classes)
        throw input_error((root / classes[c]).string(),
                          "class " + std::to_string(c) + " of " + std::to_string(classes.size()) +
                              " has no JPEG file: it would take a class index with no samples and shift the "
                              "classes after it (remove the folder, or pass --allow-empty-classes to keep it)");
      for (auto& f : in_class) files.emplace_back(std::move(f), static_cast<std::int64_t>(c));
    }
  } catch (const fs::filesystem_error& e) {
    throw input_error(e.path1().string(), e.code().message());
  }
  p.class_names = classes;
  w.set_class_names(classes);
  if (!o.quiet)
    std::fprintf(stderr, "sluice-pack: %zu classes, %zu JPEG files%s%s\n", classes.size(), files.size(),
                 other ? (", " + std::to_string(other) + " other files not packed").c_str() : "",
                 other_images ? (" (" + std::to_string(other_images) + " of them images: --skip-non-jpeg)").c_str() : "");
  progress bar(files.size(), o.quiet);
  bool first = true;
  for (const auto& [path, label] : files) {
    std::optional<sluice::io::mapped_file> f;
    try {
      f.emplace(read_image(path, o));
    } catch (const input_error& e) {
      if (!o.skip_bad) throw;
      p.skipped.emplace_back(e.file, e.reason);
      continue;
    }
    if (std::exchange(first, false)) phase("read");
    add(w, p, f->bytes(), label);
    p.source(path.string(), 0);
    bar.update(p.labels.size() + p.skipped.size(), p.bytes);
  }
}

// An archive's record as the input check sees it: with --verify full a JPEG record (or member) is
// decoded in full here, before it is packed, so --skip-bad can skip it and a failure names the
// input and the member, not the shard being written.
void check_record(const options& o, std::span<const std::byte> rec) {
#if SLUICE_WITH_TURBOJPEG
  if (o.verify == verify_mode::full && looks_like_jpeg(rec)) decode_fully(rec);
#else
  (void)o;
  (void)rec;
#endif
}

// "in.tar member 'train/0005.jpg'" for record i of a WebDataset tar (the tar is walked again to
// find the member: only for a message), "in.tfrecord record 5" otherwise.
std::string record_name(const options& o, const std::string& input, std::uint64_t i) {
  if (o.kind == "wds" && o.fields.empty()) {
    try {
      const sluice::io::wds_tar_reader r(input, {.record_field = o.field, .label_field = o.label,
                                                 .index = sluice::io::saved_index::ignore, .ignore_zeros = o.ignore_zeros});
      if (i < r.size()) {
        const std::uint64_t at = r.offset(static_cast<std::size_t>(i));
        std::string name;
        sluice::io::detail::walk_tar(r.file().bytes(), input, o.ignore_zeros,
                                     [&](const sluice::io::detail::tar_member_view& m) {
                                       if (m.data != at) return true;
                                       name.assign(m.name);
                                       return false;
                                     });
        if (!name.empty()) return input + " member '" + name + "'";
      }
    } catch (const sluice::error&) {  // the input changed since: the record number still says where
    }
  }
  return input + " record " + std::to_string(i);
}

template <class Reader, class MakeReader>
void pack_readers(const options& o, sluice::io::shard_writer& w, packed& p, MakeReader make) {
  std::vector<Reader> readers;
  std::uint64_t total = 0;
  for (const auto& in : o.inputs) {
    try {
      require_regular_file(in);
      try {
        readers.push_back(make(in));
      } catch (const input_error&) {
        throw;
      } catch (const sluice::error& e) {
        throw input_error(in, e.what());
      }
      total += readers.back().size();
    } catch (const input_error& e) {
      if (!o.skip_bad) throw;
      p.skipped.emplace_back(e.file, e.reason);
    }
  }
  phase("read");
  progress bar(total, o.quiet);
  for (const auto& r : readers)
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::span<const std::byte> rec;
      std::int64_t label = -1;
      try {
        rec = r.record(i);
        label = r.label(i);
        check_record(o, rec);
      } catch (const sluice::error& e) {
        input_error err(record_name(o, std::string(r.path()), i), e.what());
        if (!o.skip_bad) throw err;
        p.skipped.emplace_back(err.file, err.reason);
        continue;
      }
      add(w, p, rec, label);
      p.source(r.path(), i);
      bar.update(p.labels.size(), p.bytes);
    }
}

// ---- shards with fields -------------------------------------------------------------------------
// A WebDataset tar whose samples' members named in --fields become the fields of each record (the
// member's bytes as they are; a dtype other than u8 takes them as that type's raw elements). A
// sample missing a field, holding one twice or holding bytes that are not whole elements is a
// format_error naming the file, the sample (record number, key) and the field.
class wds_fields_source {
 public:
  wds_fields_source(const std::string& path, const options& o) : file_(path) {
    const auto& fields = o.fields;
    // Member extensions match in any case, as WebDataset's reader lower-cases them (split_key).
    const std::string label = sluice::io::detail::lower_ascii(o.label);
    std::vector<std::string> exts;
    for (const auto& f : fields) exts.push_back(sluice::io::detail::lower_ascii(f.name));
    std::string key, lower;
    std::vector<std::span<const std::byte>> cur(fields.size());
    std::vector<bool> have(fields.size());
    std::int64_t cur_label = -1;
    bool have_label = false, open = false;
    std::uint64_t first = 0;
    auto fail = [&](std::uint64_t at, const std::string& why) {
      throw sluice::format_error(path, {.record = labels_.size(), .offset = at}, "sample '" + key + "': " + why);
    };
    auto finish = [&] {
      if (!open) return;
      const bool complete = std::find(have.begin(), have.end(), false) == have.end() && (label.empty() || have_label);
      if (!complete) sluice::io::detail::throw_if_split(file_.bytes(), path, o.ignore_zeros, key);
      for (std::size_t k = 0; k < fields.size(); ++k)
        if (!have[k]) fail(first, "field '" + fields[k].name + "': missing (no '" + key + "." + fields[k].name + "' member)");
      if (!label.empty() && !have_label) fail(first, "has no '" + label + "' label member");
      views_.insert(views_.end(), cur.begin(), cur.end());
      labels_.push_back(cur_label);
      open = false;
    };
    sluice::io::detail::walk_tar(file_.bytes(), path, o.ignore_zeros, [&](const sluice::io::detail::tar_member_view& m) {
      std::string_view k, ext;
      if (!sluice::io::detail::split_key(m.name, k, ext, lower)) return true;
      if (!open || k != key) {
        finish();
        key.assign(k);
        std::fill(have.begin(), have.end(), false);
        std::fill(cur.begin(), cur.end(), std::span<const std::byte>{});
        cur_label = -1;
        have_label = false;
        first = m.header;
        open = true;
      }
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (ext != exts[f]) continue;
        if (have[f]) fail(m.header, "field '" + fields[f].name + "': two members");
        const std::size_t esz = sluice::dtype_size(fields[f].type);
        if (m.size % esz != 0)
          fail(m.data, "field '" + fields[f].name + "': " + std::to_string(m.size) + " bytes, not a whole number of " +
                           sluice::dtype_name(fields[f].type) + " elements");
        cur[f] = m.body;
        have[f] = true;
      }
      if (!label.empty() && ext == label) {
        if (have_label) fail(m.header, "two '" + label + "' label members");
        cur_label = sluice::io::detail::parse_label(m.body, path, key, m.data);
        have_label = true;
      }
      return true;
    });
    finish();
    n_ = fields.size();
  }
  [[nodiscard]] std::size_t size() const noexcept { return labels_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return file_.path(); }
  // Record i's fields (views into the mapping) and label.
  std::int64_t get(std::size_t i, std::vector<std::span<const std::byte>>& out) const {
    out.assign(views_.begin() + static_cast<std::ptrdiff_t>(i * n_), views_.begin() + static_cast<std::ptrdiff_t>((i + 1) * n_));
    return labels_[i];
  }

 private:
  sluice::io::mapped_file file_;
  std::size_t n_ = 0;
  std::vector<std::span<const std::byte>> views_;  // n_ a record
  std::vector<std::int64_t> labels_;
};

// A feature of a tf.train.Example decoded into a field of type T (the tf_example_reader rules:
// bytes_list or int64_list for 1-byte types, int64_list range-checked for other integers and bool,
// float_list for f32 and f64).
template <class T>
void decode_feature(std::span<const std::byte> value, const sluice::io::detail::pb::where& w, std::vector<std::byte>& out) {
  namespace pb = sluice::io::detail::pb;
  using sluice::io::tf_list;
  constexpr bool ints = pb::int_like<T>;
  const auto f = pb::parse_feature(value, ints ? pb::range_of<T>() : pb::int_range{}, w);
  bool ok = false;
  if constexpr (pb::byte_like<T>) ok = f.kind == tf_list::bytes || f.kind == tf_list::int64s;
  else if constexpr (ints) ok = f.kind == tf_list::int64s;
  else ok = f.kind == tf_list::floats;
  if (!ok)
    w.fail(value.data(), "is a " + std::string(sluice::io::tf_list_name(f.kind)) + ", but its field is " +
                             sluice::dtype_name(sluice::dtype_of<T>) + " (bytes and 1-byte types take bytes_list or "
                             "int64_list, other integers and bool int64_list, f32 and f64 float_list)");
  sluice::io::tf_example_sample<sluice::schema<sluice::field<"v", T, sluice::variable>>> smp;
  smp.features[0] = f;
  out.resize(smp.template size_of<"v">());
  smp.template write<"v">(out, sluice::sample_context{});
}
using decode_fn = void (*)(std::span<const std::byte>, const sluice::io::detail::pb::where&, std::vector<std::byte>&);
decode_fn decoder_for(sluice::dtype t) {
  using sluice::dtype;
  switch (t) {
    case dtype::u8: return &decode_feature<std::uint8_t>;
    case dtype::i8: return &decode_feature<std::int8_t>;
    case dtype::u16: return &decode_feature<std::uint16_t>;
    case dtype::i16: return &decode_feature<std::int16_t>;
    case dtype::i32: return &decode_feature<std::int32_t>;
    case dtype::u32: return &decode_feature<std::uint32_t>;
    case dtype::i64: return &decode_feature<std::int64_t>;
    case dtype::u64: return &decode_feature<std::uint64_t>;
    case dtype::boolean: return &decode_feature<bool>;
    case dtype::f32: return &decode_feature<float>;
    case dtype::f64: return &decode_feature<double>;
    default: return nullptr;  // f16, bf16: refused by the option parser
  }
}

// A TFRecord file of tf.train.Example records; the features named in --features become the
// fields of each record, --label names an int64 feature holding the record's one label.
class tf_fields_source {
 public:
  tf_fields_source(const std::string& path, const options& o)
      : r_(path, {.index = sluice::io::saved_index::ignore}), fields_(o.fields), label_(o.label_given ? o.label : "") {
    for (const auto& f : fields_) decode_.push_back(decoder_for(f.type));
    bufs_.resize(fields_.size());
  }
  [[nodiscard]] std::size_t size() const noexcept { return r_.size(); }
  [[nodiscard]] std::string_view path() const noexcept { return r_.path(); }
  std::int64_t get(std::size_t i, std::vector<std::span<const std::byte>>& out) {
    namespace pb = sluice::io::detail::pb;
    const auto rec = r_.record(i);
    pb::where w{.file = r_.path(), .record = i, .base = r_.offset(i), .start = rec.data()};
    std::vector<std::span<const std::byte>> value(fields_.size());
    std::vector<const std::byte*> at(fields_.size(), nullptr);
    std::span<const std::byte> label_value;
    const std::byte* label_at = nullptr;
    sluice::io::for_each_tf_feature(rec, w, [&](std::string_view key, std::span<const std::byte> v, const std::byte* e) {
      for (std::size_t k = 0; k < fields_.size(); ++k)
        if (key == fields_[k].name) {
          value[k] = v;  // the last one wins
          at[k] = e;
        }
      if (!label_.empty() && key == label_) {
        label_value = v;
        label_at = e;
      }
    });
    out.resize(fields_.size());
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      pb::where wf = w;
      wf.feature = fields_[k].name;
      if (at[k] == nullptr) wf.fail(rec.data(), "missing from the record (--features names it)");
      decode_[k](value[k], wf, bufs_[k]);
      const std::size_t n = bufs_[k].size() / sluice::dtype_size(fields_[k].type);
      if (fields_[k].kind == sluice::extent::fixed && n != static_cast<std::size_t>(fields_[k].shape[0]))
        wf.fail(at[k], "holds " + std::to_string(n) + " values, but --features fixes it at " + std::to_string(fields_[k].shape[0]));
      out[k] = bufs_[k];
    }
    if (label_.empty()) return -1;
    pb::where wl = w;
    wl.feature = label_;
    if (label_at == nullptr) wl.fail(rec.data(), "missing from the record (--label names it)");
    std::vector<std::byte> one;
    decode_feature<std::int64_t>(label_value, wl, one);
    if (one.size() != 8) wl.fail(label_at, "holds " + std::to_string(one.size() / 8) + " values; a label needs exactly one");
    std::int64_t y;
    std::memcpy(&y, one.data(), 8);
    return y;
  }

 private:
  sluice::io::tfrecord_reader r_;
  std::vector<sluice::io::shard_schema_field> fields_;
  std::string label_;
  std::vector<decode_fn> decode_;
  std::vector<std::vector<std::byte>> bufs_;  // this record's decoded fields
};

template <class Source>
void pack_field_sources(const options& o, sluice::io::shard_writer& w, packed& p) {
  w.set_schema(o.fields);
  p.schema = w.schema();
  std::vector<Source> sources;
  std::uint64_t total = 0;
  for (const auto& in : o.inputs) {
    try {
      require_regular_file(in);
      try {
        sources.emplace_back(in, o);
      } catch (const sluice::error& e) {
        throw input_error(in, e.what());
      }
      total += sources.back().size();
    } catch (const input_error& e) {
      if (!o.skip_bad) throw;
      p.skipped.emplace_back(e.file, e.reason);
    }
  }
  phase("read");
  progress bar(total, o.quiet);
  std::vector<std::span<const std::byte>> views;
  for (auto& r : sources)
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::int64_t label = -1;
      try {
        label = r.get(i, views);
        for (const auto& v : views) check_record(o, v);
      } catch (const sluice::error& e) {
        input_error err(std::string(r.path()) + " record " + std::to_string(i), e.what());
        if (!o.skip_bad) throw err;
        p.skipped.emplace_back(err.file, err.reason);
        continue;
      }
      add_fields(w, p, views, label);
      p.source(r.path(), i);
      bar.update(p.labels.size(), p.bytes);
    }
}

// ---- npy ---------------------------------------------------------------------------------------
// A uint8 array's rows are single records, their bytes as they are (a shard of images or pixel
// rows, as sluice-pack always wrote them). Any other array becomes a shard with fields, so its
// dtype and row shape travel with it: field "data" fixed at the row's shape with the array's
// dtype (a 1-D array: one element a record, shape []), and with --labels also field "label"
// (i64, shape []) beside the record's own label. An array sluice cannot type (complex, strings)
// is bad input naming the file and its dtype.
void pack_npy(const options& o, sluice::io::shard_writer& w, packed& p) {
  const std::string& in = o.inputs[0];
  std::optional<sluice::io::npy_reader> r;
  bool bytes = false;
  std::vector<sluice::io::shard_schema_field> schema;
  try {
    require_regular_file(in);
    if (!o.labels_npy.empty()) require_regular_file(o.labels_npy);
    try {
      r.emplace(in, sluice::io::npy_options{.labels_path = o.labels_npy});
    } catch (const sluice::error& e) {
      throw input_error(in, e.what());
    }
    const auto& d = r->dtype();
    const auto& shape = r->shape();
    bytes = d.kind == 'u' && d.item_bytes == 1 && shape.size() > 1;
    if (!bytes) {
      sluice::dtype t{};
      try {
        t = sluice::io::npy_element_type(d, in);
      } catch (const sluice::format_error& e) {
        throw input_error(in, e.cause() + "; sluice-pack npy packs arrays of numbers or bool");
      }
      if (shape.size() - 1 > sluice::io::shard_format::max_field_dims)
        throw input_error(in, "rows of " + std::to_string(shape.size() - 1) +
                                  " dimensions; a shard field has at most " +
                                  std::to_string(sluice::io::shard_format::max_field_dims));
      sluice::io::shard_schema_field data{"data", t, sluice::extent::fixed, {}};
      for (std::size_t k = 1; k < shape.size(); ++k) data.shape.push_back(static_cast<std::int64_t>(shape[k]));
      schema.push_back(std::move(data));
      if (!o.labels_npy.empty()) schema.push_back({"label", sluice::dtype::i64, sluice::extent::fixed, {}});
    }
  } catch (const input_error& e) {
    if (!o.skip_bad) throw;
    p.skipped.emplace_back(e.file, e.reason);
    return;
  }
  if (!bytes) {
    w.set_schema(schema);
    p.schema = w.schema();
  }
  phase("read");
  progress bar(r->size(), o.quiet);
  const auto& labels = r->labels();
  std::vector<std::span<const std::byte>> views(schema.size());
  for (std::size_t i = 0; i < r->size(); ++i) {
    const std::int64_t label = r->label(i);
    if (bytes) {
      const auto rec = r->record(i);
      try {
        check_record(o, rec);  // a row that holds a JPEG is decoded under --verify full, as before
      } catch (const sluice::error& e) {
        input_error err(record_name(o, in, i), e.what());
        if (!o.skip_bad) throw err;
        p.skipped.emplace_back(err.file, err.reason);
        continue;
      }
      add(w, p, rec, label);
    } else {
      views[0] = r->record(i);
      if (views.size() > 1) views[1] = std::as_bytes(std::span(&labels[i], 1));
      add_fields(w, p, views, label);
    }
    p.source(in, i);
    bar.update(p.labels.size(), p.bytes);
  }
}

// Re-opens the sealed partial file and checks it against what was packed.
void verify(const options& o, const std::string& file, const packed& p) {
  auto fail = [&](std::string why) { throw verify_error("sluice-pack: verification of '" + file + "' failed: " + why); };
  // "record 5 (from in.tar member 's0005.jpg')": the shard's record and the input it was packed from.
  auto rec_name = [&](std::size_t i) {
    std::string n = "record " + std::to_string(i);
    if (i < p.from_input.size()) {
      const std::string& in = p.inputs[p.from_input[i]];
      n += " (from " + (o.kind == "imagefolder" ? "'" + in + "'" : record_name(o, in, p.from_record[i])) + ")";
    }
    return n;
  };
  try {
    sluice::io::shard_reader r(file, {.verify = false});
    if (r.size() != p.labels.size())
      fail(std::to_string(r.size()) + " records, expected " + std::to_string(p.labels.size()));
    if (r.class_names() != p.class_names) fail("the class names differ from the input's");
    if (r.schema() != p.schema) fail("the schema differs from the one packed");
    for (std::size_t i = 0; i < r.size() && !p.schema.empty(); ++i) {
      // Every record's field table is checked by for_each_field; each field against the input.
      r.for_each_field(i, [&](std::size_t k, std::span<const std::byte> v) {
        const std::string where = rec_name(i) + ", field '" + p.schema[k].name + "': ";
        if (sluice::io::crc32c(v) != p.field_crcs[i * p.schema.size() + k]) fail(where + "bytes differ from the input");
        if (o.verify == verify_mode::full && looks_like_jpeg(v)) {
          try {
            decode_fully(v);
          } catch (const sluice::format_error& e) {
            fail(where + e.cause());
          }
        }
      });
      if (r.label(i) != p.labels[i]) fail(rec_name(i) + ": label differs");
      if (i == 0) phase("verify");
    }
    for (std::size_t i = 0; i < r.size() && p.schema.empty(); ++i) {
      const auto rec = r.record(i);
      if (sluice::io::crc32c(rec) != p.crcs[i]) fail(rec_name(i) + ": bytes differ from the input");
      if (r.label(i) != p.labels[i]) fail(rec_name(i) + ": label differs");
      if (o.verify == verify_mode::full && looks_like_jpeg(rec)) {
        try {
          decode_fully(rec);
        } catch (const sluice::format_error& e) {  // e.g. a record over the shard format's 4 GiB limit
          fail(rec_name(i) + ": " + e.cause());
        }
      }
      if (i == 0) phase("verify");
    }
    if (r.size() == 0) phase("verify");
    if (r.has_checksums()) (void)r.verify_all();
  } catch (const sluice::format_error& e) {  // e.g. a record over the shard format's 4 GiB limit
    fail(e.what());
  }
}

// An input written, truncated, replaced or removed while the pack ran (its size, times or inode
// moved since the pack began) may have given the shard records it never held at any one moment,
// even when each record verified against the bytes there when it was read: such a pack is refused,
// naming the input and what changed. The inputs' identities are taken before any is opened.
class inputs_unchanged {
 public:
  explicit inputs_unchanged(const options& o) {
    std::vector<std::string> named = o.inputs;
    if (!o.labels_npy.empty()) named.push_back(o.labels_npy);
    for (auto& in : named) {
      struct stat st {};
      if (::stat(in.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        files_.emplace_back(std::move(in), sluice::file_identity::of(st));
    }
  }
  void check() const {
    for (const auto& [path, then] : files_) {
      struct stat st {};
      std::string why;
      if (::stat(path.c_str(), &st) != 0) why = "it was removed or renamed";
      else if (const auto now = sluice::file_identity::of(st); !(now == then))
        why = sluice::file_identity::describe_change(then, now);
      else continue;
      throw input_error(path, why + " while it was packed; pack it again once it is complete");
    }
  }

 private:
  std::vector<std::pair<std::string, sluice::file_identity>> files_;
};

int run(const options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const inputs_unchanged inputs_then(o);   // an input that changes from here on fails the pack
  const sluice::fault_watch inputs_watch;  // a mapped input that faults from here on fails the pack
  packed p;
  set_partial_name(0, o.out + ".partial");  // before the file exists: a signal never misses it
  sluice::io::shard_writer w(o.out, {.checksums = o.checksums});
  if (o.kind == "imagefolder") {
    pack_imagefolder(o, w, p);
  } else if (o.kind == "wds" && !o.fields.empty()) {
    pack_field_sources<wds_fields_source>(o, w, p);
  } else if (o.kind == "tfrecord" && !o.fields.empty()) {
    pack_field_sources<tf_fields_source>(o, w, p);
  } else if (o.kind == "wds") {
    pack_readers<sluice::io::wds_tar_reader>(o, w, p, [&](const std::string& in) {
      return sluice::io::wds_tar_reader(in, {.record_field = o.field, .label_field = o.label,
                                             .index = sluice::io::saved_index::ignore,
                                             .ignore_zeros = o.ignore_zeros});
    });
  } else if (o.kind == "tfrecord") {
    pack_readers<sluice::io::tfrecord_reader>(o, w, p, [&](const std::string& in) {
      return sluice::io::tfrecord_reader(in, {.index = sluice::io::saved_index::ignore});
    });
  } else if (o.kind == "npy") {
    pack_npy(o, w, p);
  } else if (o.kind == "idx") {
#if SLUICE_WITH_ZLIB
    for (const auto& in : o.inputs) require_regular_file(in);
    std::optional<sluice::io::idx_reader> r;
    try {
      r.emplace(o.inputs[0], o.inputs.size() > 1 ? o.inputs[1] : std::string());
    } catch (const sluice::error& e) {
      throw input_error(o.inputs[0], e.what());
    }
    phase("read");
    progress bar(r->size(), o.quiet);
    for (std::size_t i = 0; i < r->size(); ++i) {
      add(w, p, r->record(i), r->label(i));
      p.source(o.inputs[0], i);
      bar.update(p.labels.size(), p.bytes);
    }
#endif
  }

  // An empty shard is always a mistake upstream (a wrong directory, every input bad): refuse it.
  if (p.labels.empty()) {
    for (const auto& [path, why] : p.skipped) std::fprintf(stderr, "sluice-pack: skipped '%s': %s\n", path.c_str(), why.c_str());
    throw input_error(o.inputs[0], p.skipped.empty() ? "no records to pack"
                                                     : "no records to pack (all " + std::to_string(p.skipped.size()) +
                                                           " inputs were bad)");
  }

  // The skipped-input report is written beside the shard, also as a partial file.
  std::optional<partial_text_file> report;
  const std::string report_path = o.out + ".skipped.tsv";
  if (!p.skipped.empty()) {
    report.emplace(report_path, 1);
    report->stream() << "path\treason\n";
    for (const auto& [path, why] : p.skipped) report->stream() << tsv_escape(path) << '\t' << tsv_escape(why) << '\n';
    report->seal();
  }

  // An input truncated while it was mapped reads as zeros past its new end (sluice's SIGBUS guard,
  // core/file_guard.hpp) instead of killing the pack: such a pack is refused, naming the input.
  try {
    inputs_watch.check();
  } catch (const sluice::format_error& e) {  // e.g. a record over the shard format's 4 GiB limit
    throw input_error(e.file(), e.cause());
  }
  w.seal();  // complete and fsynced, still only under the partial name
  phase("sealed");
  if (o.verify != verify_mode::none) verify(o, w.partial_path(), p);
  inputs_then.check();
  phase("commit");
  {
    // The rename between two steps of commit_state: a handler that runs meanwhile (on another
    // thread) leaves the report to this thread, so the message is true either way.
    signals_blocked b;
    int step = running;
    if (!commit_state.compare_exchange_strong(step, committing))
      for (;;) ::pause();  // a handler is ending the run: it removes the partial files and exits
    try {
      w.commit();
    } catch (...) {
      commit_state.store(running);
      if (const int sig = pending_signal.load(); sig != 0) on_signal(sig);  // no shard: says so, exits
      throw;
    }
    clear_partial_name(0);
    commit_state.store(committed);
    if (const int sig = pending_signal.load(); sig != 0) on_signal(sig);  // "complete and verified"
  }
  std::error_code ec;
  if (report) report->commit();
  else if (fs::remove(report_path, ec) && !o.quiet)
    std::fprintf(stderr, "sluice-pack: removed %s left by an earlier run\n", report_path.c_str());
  if (fs::remove(o.out + ".classes", ec) && !o.quiet)
    std::fprintf(stderr, "sluice-pack: removed %s.classes left by an earlier version (class names are in the shard)\n",
                 o.out.c_str());
  if (report) sluice::io::shard_writer::sync_directory_of(report_path);

  if (!p.skipped.empty())
    std::fprintf(stderr, "sluice-pack: skipped %zu bad input%s, listed in %s\n", p.skipped.size(),
                 p.skipped.size() == 1 ? "" : "s", report_path.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!o.quiet)
    std::fprintf(stderr, "sluice-pack: wrote %s: %zu records, %.1f MB in %.2f s%s\n", o.out.c_str(), p.labels.size(),
                 p.bytes / 1e6, s,
                 o.verify == verify_mode::full ? ", verified (CRCs and full JPEG decode)"
                 : o.verify == verify_mode::crc ? ", verified" : ", not verified (--verify none)");
  return exit_ok;
}

}  // namespace

// What a failure left: nothing, or (a failure after the rename) a complete, verified shard.
const char* outcome() {
  return commit_state.load() == committed ? "sluice-pack: the shard itself was written and verified before this failure"
                   : "sluice-pack: no shard written";
}

int main(int argc, char** argv) {
  install_signal_handlers();  // first: no phase runs unhandled
  const options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const input_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fprintf(stderr, "%s%s\n", outcome(), o.skip_bad ? "" : " (--skip-bad skips bad inputs and lists them)");
    return exit_bad_input;
  } catch (const verify_error& e) {
    std::fprintf(stderr, "%s\n%s\n", e.what(), outcome());
    return exit_bad_input;
  } catch (const sluice::io_error& e) {
    std::fprintf(stderr, "%s\n%s\n", e.what(), outcome());
    return exit_io;
  } catch (const sluice::usage_error& e) {
    std::fprintf(stderr, "%s\n%s\n", e.what(), outcome());
    return exit_bad_input;
  } catch (const sluice::format_error& e) {  // e.g. a record over the shard format's 4 GiB limit
    std::fprintf(stderr, "%s\n%s\n", e.what(), outcome());
    return exit_bad_input;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-pack: %s\n%s\n", e.what(), outcome());
    return exit_io;
  }
}
