// A tiny next-token language model trained with libtorch, fed PACKED token documents by sluice.
//
// 1. Builds its own data set: every regular file of a text directory (default
//    /usr/share/common-licenses, which Debian always has), split into paragraphs (blank lines);
//    each paragraph is one document of byte-level tokens (vocabulary 256) stored as uint16, written
//    with io::write_token_documents (a token file + an offsets file).
// 2. Reads them back with io::token_documents<std::uint16_t> and packs them into rows of L tokens:
//      from(shuffle(n_docs)) | read(docs) | collate(batch_options{.batch = B}, pack<"tokens">{.length = L})
//    | prefetch(2)
//    Each batch: "tokens" u16 {rows, L}, "tokens.doc_ids" i32 {rows, L} (-1 on padding),
//    "tokens.position_ids" i32 {rows, L} (0 where a document piece starts).
// 3. Trains: inputs = tokens[:, :-1], targets = tokens[:, 1:]; the loss is masked where the target
//    is padding or lies in another document than its input (doc_ids differ), so the model is never
//    asked to predict across a document boundary. The model sees the last K tokens through
//    embeddings, concatenated, then an MLP (one hidden layer); a context token from before the current document
//    piece (position_ids < j) is zeroed, so no document leaks into the next.
//
//   lm_tokens [--text DIR] [--epochs 3] [--max-steps 0] [--batch 8] [--length 128] [--workers 2]
//             [--seed 1] [--lr 0.01] [--threads 1] [--every 20] [--check]
// Exit: 0 when the final loss is below the first, 1 otherwise, 77 when DIR holds no text (ctest
// skips), 2 on a usage error. --check only makes the verdict explicit in the output.
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/io/tokens.hpp"
#include "sluice/sluice.hpp"
#include "sluice/stage/field_collate.hpp"

namespace fs = std::filesystem;

namespace {

struct options {
  std::string text = "/usr/share/common-licenses";
  int epochs = 3;
  long max_steps = 0;  // 0: no limit
  std::size_t batch = 8, length = 128, workers = 2;
  std::uint64_t seed = 1;
  double lr = 1e-2;
  int threads = 1, every = 20;
  bool check = false;
};

// ---- The data set: paragraphs of the text files, byte-level tokens.
std::vector<std::vector<std::uint16_t>> read_paragraphs(const std::string& dir, std::size_t& files) {
  std::vector<std::vector<std::uint16_t>> docs;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return docs;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.is_symlink()) paths.push_back(e.path());  // symlinks: duplicates
  std::sort(paths.begin(), paths.end());
  files = 0;
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.empty()) continue;
    ++files;
    std::vector<std::uint16_t> cur;
    std::size_t i = 0;
    while (i < text.size()) {
      const std::size_t nl = text.find('\n', i);
      const std::size_t e = nl == std::string::npos ? text.size() : nl + 1;
      const bool blank = text.find_first_not_of(" \t\r\n", i) >= e;
      if (blank) {
        if (!cur.empty()) docs.push_back(std::move(cur));
        cur.clear();
      } else {
        for (std::size_t k = i; k < e; ++k) cur.push_back(static_cast<std::uint8_t>(text[k]));
      }
      i = e;
    }
    if (!cur.empty()) docs.push_back(std::move(cur));
  }
  return docs;
}

// ---- The model: the last K tokens -> embeddings (K * E) -> hidden layer -> 256 logits.
// Small on purpose: Debian's libtorch runs on the reference BLAS (about 2 GFLOP/s a core here).
constexpr std::int64_t vocab = 256, K = 4, E = 16, H = 64;
struct lmImpl : torch::nn::Module {
  lmImpl()
      : emb(register_module("emb", torch::nn::Embedding(vocab, E))),
        fc1(register_module("fc1", torch::nn::Linear(K * E, H))),
        out(register_module("out", torch::nn::Linear(H, vocab))) {}
  // x: int64 {rows, T} tokens; pos: int64 {rows, T} position in the document piece.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& pos) {
    auto e = emb(x);  // {rows, T, E}
    std::vector<torch::Tensor> ctx{e};
    for (std::int64_t j = 1; j < K; ++j) {
      // token t - j, zero where it lies before the start of t's document piece (or the row)
      auto shifted = torch::nn::functional::pad(e, torch::nn::functional::PadFuncOptions({0, 0, j, 0}))
                         .narrow(1, 0, e.size(1));
      ctx.push_back(shifted * (pos >= j).unsqueeze(-1).to(e.dtype()));
    }
    auto h = torch::relu(fc1(torch::cat(ctx, -1)));
    return out(h);  // {rows, T, vocab}
  }
  torch::nn::Embedding emb;
  torch::nn::Linear fc1, out;
};
TORCH_MODULE(lm);

// ---- Batch tensors -> torch.
// DLPACK: this is the one place a batch's tensors become torch tensors. from_blob makes views with
// no owner: they are valid only while the sluice batch is alive (this loop iteration), which is
// why the token tensor is converted (copied) at once. When sluice's DLPack export lands, replace
// this with torch::fromDLPack(<the batch's DLPack export>) — zero copy, and the slot stays alive
// as long as the tensor does.
template <class T>
torch::Tensor view_of(const sluice::typed_tensor<T>& t, torch::ScalarType type) {
  std::vector<std::int64_t> shape(t.shape().begin(), t.shape().end());
  return torch::from_blob(const_cast<T*>(t.data()), shape, type);
}
// libtorch 1.13 has no uint16: read the bits as int16 and widen without sign (tokens up to 65535).
torch::Tensor tokens_of(const sluice::typed_tensor<std::uint16_t>& t) {
  return view_of(t, torch::kInt16).to(torch::kInt64).bitwise_and(0xFFFF);
}

int usage(const char* what) {
  std::fprintf(stderr, "lm_tokens: %s\n", what);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--text") o.text = next();
    else if (a == "--epochs") o.epochs = std::stoi(next());
    else if (a == "--max-steps") o.max_steps = std::stol(next());
    else if (a == "--batch") o.batch = std::stoul(next());
    else if (a == "--length") o.length = std::stoul(next());
    else if (a == "--workers") o.workers = std::stoul(next());
    else if (a == "--seed") o.seed = std::stoull(next());
    else if (a == "--lr") o.lr = std::stod(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--every") o.every = std::stoi(next());
    else if (a == "--check") o.check = true;
    else return usage(("unknown option " + a).c_str());
  }
  if (o.length < 2 || o.batch == 0 || o.epochs < 1 || o.every < 1) return usage("bad --length/--batch/--epochs/--every");

  // 1. The data set.
  std::size_t files = 0;
  const auto paragraphs = read_paragraphs(o.text, files);
  if (paragraphs.empty()) {
    std::printf("lm_tokens: no text under '%s'; skipping\n", o.text.c_str());
    return 77;
  }
  std::string tmpl = (fs::temp_directory_path() / "sluice-lm-tokens-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return usage("cannot create a temporary directory");
  const fs::path dir = tmpl;
  struct cleanup {
    fs::path p;
    ~cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup_dir{dir};
  const std::string tokens_path = (dir / "text.u16").string(), offsets_path = (dir / "text.idx").string();
  sluice::io::write_token_documents<std::uint16_t>(tokens_path, offsets_path, paragraphs);

  sluice::io::token_documents<std::uint16_t> docs{tokens_path, offsets_path, {.vocab = vocab}};
  std::printf("data: %zu files under %s -> %zu documents (paragraphs), %zu byte tokens\n", files, o.text.c_str(),
              docs.size(), docs.tokens());

  auto loader = sluice::from(sluice::sample::shuffle(docs.size(), {.seed = o.seed})) | sluice::read(docs) |
                sluice::collate(sluice::batch_options{.batch = o.batch}, sluice::pack<"tokens">{.length = o.length}) |
                sluice::prefetch(2, {.workers = o.workers});

  // The loader alone, one epoch: what it delivers without a model.
  {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t rows = 0;
    for (auto& b : loader.epoch(1000)) rows += static_cast<std::size_t>(b.get<"tokens">().shape()[0]);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loader alone: %zu packed rows of %zu in %.3f s (%.1f M tokens/s)\n", rows, o.length, s,
                static_cast<double>(rows * o.length) / s / 1e6);
  }

  // 2. Training.
  torch::manual_seed(o.seed);
  torch::set_num_threads(o.threads);
  lm model;
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(o.lr));

  double first = -1, window_sum = 0, last_window = -1;
  long window_n = 0, step = 0;
  const auto t0 = std::chrono::steady_clock::now();
  bool done = false;
  for (int epoch = 0; epoch < o.epochs && !done; ++epoch) {
    double epoch_sum = 0;
    long epoch_n = 0;
    for (auto& b : loader.epoch(static_cast<std::uint64_t>(epoch))) {
      auto tokens = tokens_of(b.get<"tokens">());                                     // {rows, L}
      auto doc = view_of(b.get<"tokens.doc_ids">(), torch::kInt32);                  // valid in this iteration
      auto pos = view_of(b.get<"tokens.position_ids">(), torch::kInt32).to(torch::kInt64);
      const std::int64_t T = tokens.size(1) - 1;
      auto inputs = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);
      auto d_in = doc.narrow(1, 0, T), d_tg = doc.narrow(1, 1, T);
      auto mask = ((d_tg != -1) & (d_in == d_tg)).to(torch::kFloat32);  // same document, not padding
      auto logits = model->forward(inputs, pos.narrow(1, 0, T));
      auto nll = torch::nn::functional::cross_entropy(
          logits.reshape({-1, vocab}), targets.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      auto loss = (nll * mask.reshape({-1})).sum() / mask.sum().clamp_min(1);
      opt.zero_grad();
      loss.backward();
      opt.step();

      const double l = loss.template item<double>();
      epoch_sum += l;
      ++epoch_n;
      window_sum += l;
      ++step;
      if (++window_n == o.every) {
        const double m = window_sum / static_cast<double>(window_n);
        if (first < 0) first = m;
        last_window = m;
        std::printf("step %5ld  loss %.4f (mean of the last %d steps)\n", step, m, o.every);
        std::fflush(stdout);
        window_sum = 0;
        window_n = 0;
      }
      if (o.max_steps > 0 && step >= o.max_steps) {
        done = true;
        break;
      }
    }
    std::printf("epoch %d: mean loss %.4f over %ld steps\n", epoch, epoch_n ? epoch_sum / static_cast<double>(epoch_n) : 0.0,
                epoch_n);
  }
  if (window_n > 0) {  // the steps after the last full window
    last_window = window_sum / static_cast<double>(window_n);
    if (first < 0) first = last_window;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%ld steps in %.1f s (%.1f steps/s); loss %.4f -> %.4f (uniform guess: %.4f)\n", step, secs,
              static_cast<double>(step) / secs, first, last_window, std::log(static_cast<double>(vocab)));
  const bool fell = last_window < first;
  if (o.check) std::printf("check: the loss %s\n", fell ? "fell" : "did NOT fall");
  return fell ? 0 : 1;
}
