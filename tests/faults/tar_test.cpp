// WebDataset tar shards as real tools write them, checked against Python's `tarfile`: every
// sample tarfile lists, sluice reads, with the same bytes at the same offset; what sluice cannot
// read faithfully (sparse members, stray zero blocks without ignore_zeros, truncation) is a
// format_error naming the file, never a silently shorter dataset. Archives come from GNU tar
// (ustar, gnu, pax formats), `cat` of two archives, and a small header writer below for what
// tar tools do not write on demand (pax size= overrides, base-256 sizes, 'S' sparse headers,
// zero blocks in the middle). Cases needing python3 or GNU tar are Skipped without them.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "sluice/io/wds_tar.hpp"
#include "test_util.hpp"

using sluice_test::expect_format_error;

using namespace sluice;
using sluice_test::as_bytes;
using sluice_test::random_bytes;
using sluice_test::read_file;
using sluice_test::temp_dir;
using sluice_test::write_file;

namespace {

constexpr auto no_index = io::saved_index::ignore;

bool have_tool(const std::string& check) { return std::system((check + " >/dev/null 2>&1").c_str()) == 0; }
void need_python() {
  if (!have_tool("command -v python3")) sluice_test::skip("python3 not found");
}
void need_gnu_tar() {
  if (!have_tool("tar --version | grep -q 'GNU tar'")) sluice_test::skip("GNU tar not found");
}

// Runs a shell command and returns its standard output; fails the case if it exits non-zero.
std::string run(const std::string& cmd) {
  std::string out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  const int rc = ::pclose(p);
  INFO("command: " << cmd << "\noutput: " << out);
  REQUIRE(rc == 0);
  return out;
}

// One regular member as tarfile lists it.
struct py_member {
  std::uint64_t offset_data = 0, size = 0;
  bool sparse = false;
  std::string name;
};

// tarfile's view of `tar`: its regular members in order, or, if tarfile refuses the archive,
// an empty list and `error` set.
struct py_listing {
  std::vector<py_member> members;
  std::string error;
};

py_listing python_list(const temp_dir& dir, const std::string& tar, bool ignore_zeros) {
  const std::string script = dir.file("list_tar.py");
  write_file(script, std::string(
      "import sys, tarfile\n"
      "try:\n"
      "    with tarfile.open(sys.argv[1], 'r:', ignore_zeros=(sys.argv[2] == '1')) as t:\n"
      "        ms = t.getmembers()\n"
      "except Exception as e:\n"
      "    print('error\\t%s: %s' % (type(e).__name__, e)); sys.exit(0)\n"
      "for m in ms:\n"
      "    if m.isreg(): print('%d\\t%d\\t%d\\t%s' % (m.offset_data, m.size, int(m.issparse()), m.name))\n"));
  std::istringstream lines(run("python3 '" + script + "' '" + tar + "' " + (ignore_zeros ? "1" : "0")));
  py_listing out;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("error\t", 0) == 0) {
      out.error = line.substr(6);
      continue;
    }
    py_member m;
    std::istringstream f(line);
    int sparse = 0;
    f >> m.offset_data >> m.size >> sparse;
    f.get();
    std::getline(f, m.name);
    m.sparse = sparse != 0;
    out.members.push_back(m);
  }
  return out;
}

std::string key_of(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  return name.substr(0, name.find('.', base));
}
std::string ext_of(const std::string& name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  return dot == std::string::npos ? std::string() : name.substr(dot + 1);
}

// The content of sample i's fields, so every read can be checked against what was written.
std::vector<std::byte> jpg_of(int i) {
  static const std::size_t sizes[] = {0, 1, 511, 512, 513, 1024, 3000, 700, 10000, 77};
  return random_bytes(sizes[i % 10] + static_cast<std::size_t>(i / 10), 1000 + static_cast<std::uint64_t>(i));
}
std::string cls_of(int i) { return std::to_string(i * 7 % 13); }

// Checks that sluice reads `tar` exactly as tarfile lists it: the same samples (keys in order),
// each record at tarfile's data offset with tarfile's size, bytes equal to what was written for
// that key, labels from the .cls members. Returns the number of samples.
std::size_t check_against_python(const temp_dir& dir, const std::string& tar, bool ignore_zeros) {
  const py_listing py = python_list(dir, tar, ignore_zeros);
  REQUIRE_MESSAGE(py.error.empty(), "tarfile refused " << tar << ": " << py.error);
  std::vector<const py_member*> jpgs;
  for (const auto& m : py.members)
    if (ext_of(m.name) == "jpg") jpgs.push_back(&m);

  const io::wds_tar_options opt{.record_field = "jpg", .label_field = "cls", .index = no_index, .ignore_zeros = ignore_zeros};
  io::wds_tar_reader r(tar, opt);
  std::vector<std::string> keys;
  const auto bytes = read_file(tar);
  io::detail::scan_wds_tar(bytes, tar, opt, &keys);
  REQUIRE(r.size() == jpgs.size());
  REQUIRE(keys.size() == jpgs.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    INFO("sample " << i << " '" << jpgs[i]->name << "'");
    CHECK(keys[i] == key_of(jpgs[i]->name));
    CHECK(r.offset(i) == jpgs[i]->offset_data);
    CHECK(r.record(i).size() == jpgs[i]->size);
    const int id = std::stoi(keys[i].substr(keys[i].rfind('s') + 1));
    const auto want = jpg_of(id);
    CHECK((r.record(i).size() == want.size() && std::equal(want.begin(), want.end(), r.record(i).begin())));
    CHECK(r.label(i) == std::stoi(cls_of(id)));
  }
  return r.size();
}

// Writes samples [first, first + count) under `root/sub` and returns their member names
// (relative to root) in order, with the directory itself first.
std::vector<std::string> write_samples(const std::string& root, const std::string& sub, int first, int count) {
  std::vector<std::string> names;
  std::string dir = root;
  std::string rel;
  std::stringstream parts(sub);
  for (std::string part; std::getline(parts, part, '/');) {
    dir += "/" + part;
    rel += (rel.empty() ? "" : "/") + part;
    ::mkdir(dir.c_str(), 0755);
    names.push_back(rel + "/");
  }
  for (int i = first; i < first + count; ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "s%04d", i);
    const std::string k = (rel.empty() ? "" : rel + "/") + key;
    write_file(root + "/" + k + ".jpg", jpg_of(i));
    write_file(root + "/" + k + ".cls", cls_of(i));
    write_file(root + "/" + k + ".json", std::string("{}"));
    names.push_back(k + ".jpg");
    names.push_back(k + ".cls");
    names.push_back(k + ".json");
  }
  return names;
}

// GNU tar of `names` (in that order, directories not recursed) under `root`.
void gnu_tar(const std::string& format, const std::string& root, const std::vector<std::string>& names,
             const std::string& out, const std::string& extra = "") {
  std::string list;
  for (const auto& n : names) list += n + "\n";
  write_file(out + ".list", list);
  run("tar --format=" + format + " " + extra + " --no-recursion -cf '" + out + "' -C '" + root + "' -T '" + out + ".list'");
}

// A small tar header writer for what tools do not write on demand. `size_field` goes into the
// ustar size field (octal, or base-256 when `base256`); the checksum is computed.
void header(std::vector<std::byte>& t, std::string_view name, std::uint64_t size_field, char type,
            bool base256 = false, std::string_view link = {}) {
  std::byte h[512] = {};
  std::memcpy(h, name.data(), std::min<std::size_t>(name.size(), 100));
  std::snprintf(reinterpret_cast<char*>(h + 100), 8, "%07o", 0644u);
  std::snprintf(reinterpret_cast<char*>(h + 108), 8, "%07o", 0u);
  std::snprintf(reinterpret_cast<char*>(h + 116), 8, "%07o", 0u);
  if (base256) {
    h[124] = std::byte{0x80};
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<std::byte>((size_field >> (8 * i)) & 0xff);
  } else {
    std::snprintf(reinterpret_cast<char*>(h + 124), 12, "%011llo", static_cast<unsigned long long>(size_field));
  }
  std::snprintf(reinterpret_cast<char*>(h + 136), 12, "%011o", 0u);
  h[156] = static_cast<std::byte>(type);
  if (!link.empty()) std::memcpy(h + 157, link.data(), std::min<std::size_t>(link.size(), 100));
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (auto b : h) sum += static_cast<unsigned char>(b);
  std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
  t.insert(t.end(), h, h + 512);
}
void body(std::vector<std::byte>& t, std::span<const std::byte> d) {
  t.insert(t.end(), d.begin(), d.end());
  t.resize(t.size() + (512 - d.size() % 512) % 512);
}
// A pax record "<len> key=value\n", its length counting its own digits.
std::string pax_record(const std::string& key, const std::string& value) {
  const std::size_t rest = key.size() + value.size() + 3;  // ' ', '=', '\n'
  std::size_t len = rest + 1;
  while (std::to_string(len).size() + rest != len) ++len;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}
void pax_header(std::vector<std::byte>& t, const std::string& records, char type = 'x') {
  header(t, "PaxHeaders/junk-name", records.size(), type);
  body(t, as_bytes(records));
}
std::string sample_name(int i, const std::string& ext) {
  char key[16];
  std::snprintf(key, sizeof key, "s%04d", i);
  return std::string(key) + "." + ext;
}
void plain_sample(std::vector<std::byte>& t, int i) {
  const auto jpg = jpg_of(i);
  header(t, sample_name(i, "jpg"), jpg.size(), '0');
  body(t, jpg);
  header(t, sample_name(i, "cls"), cls_of(i).size(), '0');
  body(t, as_bytes(cls_of(i)));
}
void end_archive(std::vector<std::byte>& t) { t.resize(t.size() + 1024); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("GNU tar ustar, gnu and pax archives: sluice reads every sample tarfile lists") {
  need_python();
  need_gnu_tar();
  temp_dir dir;
  const std::string root = dir.file("src");
  ::mkdir(root.c_str(), 0755);
  // A path over 100 bytes: ustar splits it into prefix + name, gnu writes an 'L' header, pax a
  // path= record. Directories are members too.
  const std::string deep = std::string(70, 'p') + "/" + std::string(60, 'q');
  auto names = write_samples(root, "train", 0, 20);
  auto deep_names = write_samples(root, deep, 20, 12);
  names.insert(names.end(), deep_names.begin(), deep_names.end());
  for (const char* format : {"ustar", "gnu", "pax"}) {
    INFO("format " << format);
    const std::string tar = dir.file(std::string(format) + ".tar");
    gnu_tar(format, root, names, tar);
    CHECK(check_against_python(dir, tar, false) == 32);
    CHECK(check_against_python(dir, tar, true) == 32);
  }
}

TEST_CASE("pax size= overrides the ustar size field, base-256 sizes, K and L headers in either order") {
  need_python();
  temp_dir dir;
  std::vector<std::byte> t;
  pax_header(t, pax_record("comment", "a global header without path or size is skipped"), 'g');
  for (int i = 0; i < 8; ++i) {
    const auto jpg = jpg_of(i);
    // The real size is only in the pax header; the ustar field says 0 or something wrong.
    pax_header(t, pax_record("mtime", "1700000000.5") + pax_record("path", "pax/" + sample_name(i, "jpg")) +
                      pax_record("size", std::to_string(jpg.size())));
    header(t, "wrong-name", i % 2 ? 0 : 5, '0');
    body(t, jpg);
    header(t, "pax/" + sample_name(i, "cls"), cls_of(i).size(), '0', /*base256=*/true);
    body(t, as_bytes(cls_of(i)));
  }
  // A hard link with long name and long target, 'K' before 'L', then 'L' before 'K' on a file.
  const std::string long_link(150, 'k'), long_name = std::string(130, 'n') + "/" + sample_name(8, "jpg");
  header(t, "././@LongLink", long_link.size() + 1, 'K');
  body(t, as_bytes(long_link + '\0'));
  header(t, "././@LongLink", 120, 'L');
  body(t, as_bytes(std::string(119, 'h') + '\0'));
  header(t, "h", 0, '1', false, "target");
  header(t, "././@LongLink", long_name.size() + 1, 'L');
  body(t, as_bytes(long_name + '\0'));
  header(t, "././@LongLink", long_link.size() + 1, 'K');
  body(t, as_bytes(long_link + '\0'));
  header(t, "short", jpg_of(8).size(), '0', /*base256=*/true);
  body(t, jpg_of(8));
  header(t, std::string(130, 'n').substr(0, 99), 0, '5');  // a directory: no data
  const std::string long_cls = std::string(130, 'n') + "/" + sample_name(8, "cls");
  pax_header(t, pax_record("path", long_cls));
  header(t, "x", cls_of(8).size(), '0');
  body(t, as_bytes(cls_of(8)));
  end_archive(t);
  const std::string tar = dir.file("pax-size.tar");
  write_file(tar, t);
  CHECK(check_against_python(dir, tar, false) == 9);
}

TEST_CASE("a lone zero block mid-archive is an error naming the offset, ignore_zeros reads past it") {
  need_python();
  temp_dir dir;
  std::vector<std::byte> t;
  for (int i = 0; i < 25; ++i) plain_sample(t, i);
  const std::uint64_t zero_at = t.size();
  t.resize(t.size() + 512);
  for (int i = 25; i < 50; ++i) plain_sample(t, i);
  end_archive(t);
  t.resize(10240 * ((t.size() + 10239) / 10240));  // tar's record padding is not an error
  const std::string tar = dir.file("zero.tar");
  write_file(tar, t);

  auto e = expect_format_error([&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = no_index}); });
  CHECK(e.file() == tar);
  CHECK(e.offset() == zero_at);
  CHECK(has(e.cause(), "lone zero block"));
  CHECK(has(e.cause(), "ignore_zeros"));
  CHECK(check_against_python(dir, tar, true) == 50);
}

TEST_CASE("concatenated archives: an error naming ignore_zeros by default, every sample with it") {
  need_python();
  need_gnu_tar();
  temp_dir dir;
  const std::string root = dir.file("src");
  ::mkdir(root.c_str(), 0755);
  gnu_tar("gnu", root, write_samples(root, "a", 0, 5), dir.file("a.tar"));
  gnu_tar("pax", root, write_samples(root, "b", 5, 5), dir.file("b.tar"));
  const std::string tar = dir.file("ab.tar");
  run("cat '" + dir.file("a.tar") + "' '" + dir.file("b.tar") + "' > '" + tar + "'");
  const auto a_size = read_file(dir.file("a.tar")).size();

  CHECK(check_against_python(dir, dir.file("a.tar"), false) == 5);
  auto e = expect_format_error([&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = no_index}); });
  CHECK(e.file() == tar);
  CHECK(e.offset() < a_size);
  CHECK(has(e.cause(), "data follows the end-of-archive marker"));
  CHECK(has(e.cause(), "ignore_zeros"));
  CHECK(check_against_python(dir, tar, true) == 10);
}

TEST_CASE("sparse members are refused naming the file and the member, never misread") {
  temp_dir dir;
  auto open = [&](const std::string& tar) {
    return expect_format_error([&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .index = no_index}); });
  };
  SUBCASE("hand-written GNU 'S' header") {
    std::vector<std::byte> t;
    plain_sample(t, 0);
    const std::uint64_t sparse_at = t.size();
    header(t, "s0001.jpg", 512, 'S');
    body(t, random_bytes(512, 3));
    end_archive(t);
    write_file(dir.file("s.tar"), t);
    auto e = open(dir.file("s.tar"));
    CHECK(e.file() == dir.file("s.tar"));
    CHECK(e.offset() == sparse_at);
    CHECK(has(e.cause(), "'s0001.jpg'"));
    CHECK(has(e.cause(), "sparse members are not supported"));
  }
  SUBCASE("hand-written pax GNU.sparse 1.0 header") {
    std::vector<std::byte> t;
    pax_header(t, pax_record("GNU.sparse.major", "1") + pax_record("GNU.sparse.minor", "0") +
                      pax_record("GNU.sparse.name", "s0000.jpg") + pax_record("GNU.sparse.realsize", "4096") +
                      pax_record("path", "./GNUSparseFile.1/s0000.jpg"));
    header(t, "./GNUSparseFile.1/s0000.jpg", 1024, '0');
    body(t, random_bytes(1024, 4));
    end_archive(t);
    write_file(dir.file("p.tar"), t);
    auto e = open(dir.file("p.tar"));
    CHECK(has(e.cause(), "'s0000.jpg'"));
    CHECK(has(e.cause(), "sparse members are not supported"));
  }
  SUBCASE("GNU tar -S, gnu and pax formats") {
    need_python();
    need_gnu_tar();
    const std::string root = dir.file("src");
    ::mkdir(root.c_str(), 0755);
    {  // a file with a 1 MiB hole, then data
      std::FILE* f = std::fopen((root + "/s0001.jpg").c_str(), "wb");
      REQUIRE(f != nullptr);
      std::fseek(f, 1 << 20, SEEK_SET);
      std::fputs("tail", f);
      std::fclose(f);
    }
    write_file(root + "/s0000.jpg", jpg_of(0));
    for (const char* format : {"gnu", "pax"}) {
      INFO("format " << format);
      const std::string tar = dir.file(std::string(format) + "-sparse.tar");
      gnu_tar(format, root, {"s0000.jpg", "s0001.jpg"}, tar, "-S");
      const auto py = python_list(dir, tar, false);
      REQUIRE(py.error.empty());
      REQUIRE(py.members.size() == 2);
      if (!py.members[1].sparse) {
        // The file system reported no hole, so tar wrote a plain member: read it like one.
        io::wds_tar_reader r(tar, {.record_field = "jpg", .index = no_index});
        CHECK(r.size() == 2);
        continue;
      }
      auto e = open(tar);
      CHECK(e.file() == tar);
      CHECK(has(e.cause(), "s0001.jpg'"));
      CHECK(has(e.cause(), "sparse members are not supported"));
    }
  }
}

TEST_CASE("truncated archives: cut mid-header, mid-member, after an extended header") {
  temp_dir dir;
  std::vector<std::byte> t;
  for (int i = 0; i < 4; ++i) plain_sample(t, i);  // s0003.jpg is 512 bytes, s0003.cls 1 or 2
  const std::uint64_t last_cls_header = t.size() - 1024;
  end_archive(t);
  const std::string tar = dir.file("cut.tar");
  auto open = [&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = no_index}); };

  SUBCASE("mid-header") {
    write_file(tar, std::span(t).first(last_cls_header + 100));
    auto e = expect_format_error(open);
    CHECK(e.file() == tar);
    CHECK(e.offset() == last_cls_header);
    CHECK(has(e.cause(), "truncated tar header"));
  }
  SUBCASE("mid-member") {
    const std::uint64_t jpg3_header = last_cls_header - 1024;
    write_file(tar, std::span(t).first(jpg3_header + 512 + 300));
    auto e = expect_format_error(open);
    CHECK(e.file() == tar);
    CHECK(e.offset() == jpg3_header);
    CHECK(has(e.cause(), "past the end"));
  }
  SUBCASE("after a pax header, before its member") {
    std::vector<std::byte> u(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(last_cls_header));
    const std::uint64_t pax_at = u.size();
    pax_header(u, pax_record("path", "s0003.cls"));
    write_file(tar, u);
    auto e = expect_format_error(open);
    CHECK(e.offset() == pax_at);
    CHECK(has(e.cause(), "not followed by the member"));
  }
  SUBCASE("a partial block of zeros after the end marker is padding, not truncation") {
    auto u = t;
    u.resize(u.size() + 100);
    write_file(tar, u);
    io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = no_index});
    CHECK(r.size() == 4);
  }
}

TEST_CASE("hostile headers: pax records, global size=, links with data") {
  temp_dir dir;
  const std::string tar = dir.file("h.tar");
  auto open = [&] { io::wds_tar_reader r(tar, {.record_field = "jpg", .index = no_index}); };
  auto with_pax = [&](const std::string& records, char type = 'x') {
    std::vector<std::byte> t;
    pax_header(t, records, type);
    header(t, "a.jpg", 3, '0');
    body(t, as_bytes("abc"));
    end_archive(t);
    write_file(tar, t);
  };
  for (const std::string bad : {"8 path=a\n", "99 path=a.jpg\n", "x path=a\n", "5 a\n", "7 =abc\n",
                                "11 size=-4\n", "29 size=99999999999999999999\n"}) {
    INFO("pax body: " << bad);
    with_pax(bad);
    auto e = expect_format_error(open);
    CHECK(e.offset() == 0);
    CHECK(has(e.cause(), "pax"));
  }
  with_pax(pax_record("size", "1000000"));
  CHECK(has(expect_format_error(open).cause(), "past the end"));
  with_pax(pax_record("size", "3"), 'g');
  CHECK(has(expect_format_error(open).cause(), "global"));
  with_pax(pax_record("path", ""));  // an empty value unsets path: the ustar name stands
  { io::wds_tar_reader r(tar, {.record_field = "jpg", .index = no_index}); CHECK(r.size() == 1); }

  std::vector<std::byte> t;
  header(t, "l", 10, '2', false, "a.jpg");
  body(t, as_bytes("0123456789"));
  end_archive(t);
  write_file(tar, t);
  auto e = expect_format_error(open);
  CHECK(has(e.cause(), "'l'"));
  CHECK(has(e.cause(), "link or device"));
}

TEST_CASE("a saved index from an older scan, or from ignore_zeros, does not hide a bad archive") {
  temp_dir dir;
  std::vector<std::byte> t;
  for (int i = 0; i < 3; ++i) plain_sample(t, i);
  t.resize(t.size() + 1024);  // end of one archive...
  for (int i = 3; i < 6; ++i) plain_sample(t, i);  // ...and another after it
  end_archive(t);
  const std::string tar = dir.file("idx.tar");
  write_file(tar, t);
  const io::wds_tar_options plain{.record_field = "jpg", .label_field = "cls"};

  // What the first scan saved: it stopped at the first zero block (3 samples) under "wds:jpg:cls".
  std::vector<io::record_entry> old;
  { io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = no_index, .ignore_zeros = true});
    for (std::size_t i = 0; i < 3; ++i) old.push_back({r.offset(i), r.record(i).size(), r.label(i)}); }
  REQUIRE(io::detail::save_index(tar, "wds:jpg:cls", old));
  CHECK(io::detail::wds_index_kind(plain) != "wds:jpg:cls");
  CHECK(has(expect_format_error([&] { io::wds_tar_reader r(tar, plain); }).cause(), "end-of-archive"));

  // An index saved by an ignore_zeros reader is not trusted by a reader without it.
  auto iz = plain;
  iz.ignore_zeros = true;
  { io::wds_tar_reader r(tar, iz); CHECK(r.size() == 6); }
  REQUIRE(io::detail::load_index(tar, io::detail::wds_index_kind(iz)).has_value());
  CHECK(has(expect_format_error([&] { io::wds_tar_reader r(tar, plain); }).cause(), "ignore_zeros"));
  { io::wds_tar_reader r(tar, {.record_field = "jpg", .label_field = "cls", .index = io::saved_index::use_only, .ignore_zeros = true});
    CHECK(r.size() == 6);
    CHECK(r.label(5) == std::stoi(cls_of(5))); }
}
