// A real trainer fed by sluice: a small CNN on long-tailed Fashion-MNIST, with libtorch.
//
// The data: Debian's Fashion-MNIST (gzip IDX, io/idx.hpp), made long-tailed with
// imbalance factor 100 — class c keeps its first round(6000 * 100^(-c/9)) training images in file
// order (6000, 3597, ..., 60; 14,891 images in all). The pipeline:
//   from(shuffle) | read(long-tailed view of the IDX reader) | collate(f32, normalised) | prefetch
//
// Zero copy into libtorch through DLPack: at::fromDLPack(sluice::to_dlpack(b, "data")) is a tensor
// over sluice's own slot memory (sluice/core/dlpack.hpp). Each export holds the slot, so the batch
// handle is dropped at once and the slot returns to sluice's ring when the last tensor made from
// it dies. The trainer proves it: with --check it keeps a weak reference to every batch's image
// storage and fails unless each has died by the time the next batch is asked for (a slot held
// longer would also stop the loader, which refuses to hand out more batches than it has slots).
//
//   libtorch_trainer [--data /usr/share/datasets/fashion-mnist] [--epochs 1] [--max-steps 0]
//                    [--batch 64] [--workers 2] [--seed 7] [--lr 0.01] [--threads 1] [--check]
// --check makes it exit non-zero unless the loss fell and every batch was released (ctest).
#include <ATen/DLConvertor.h>  // at::fromDLPack
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "sluice/core/dlpack.hpp"  // after torch: ATen's dlpack.h already defined the types
#include "sluice/io/idx.hpp"
#include "sluice/sluice.hpp"

namespace {

// ---- The long-tailed training set: a view over the IDX reader that keeps some of its records
// (no copy; record(i) is the underlying reader's record keep[i]).
class long_tailed_subset {
 public:
  using reader_concept = sluice::reader_tag;
  long_tailed_subset(const sluice::io::idx_reader& all, const std::vector<std::int64_t>& keep_per_class) : all_(&all) {
    std::vector<std::int64_t> kept(keep_per_class.size(), 0);
    for (std::size_t i = 0; i < all.size(); ++i) {  // file order: the first keep[c] of class c
      const std::int64_t c = all.label(i);
      if (c < 0 || static_cast<std::size_t>(c) >= kept.size() || kept[c] >= keep_per_class[c]) continue;
      ++kept[c];
      keep_.push_back(i);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return keep_.size(); }
  [[nodiscard]] std::span<const std::byte> record(std::size_t i) const { return all_->record(keep_[i]); }
  [[nodiscard]] std::int64_t label(std::size_t i) const noexcept { return all_->label(keep_[i]); }
  [[nodiscard]] std::string_view path() const noexcept { return all_->path(); }

 private:
  const sluice::io::idx_reader* all_;
  std::vector<std::size_t> keep_;
};

// ---- The model.
struct net_impl : torch::nn::Module {
  net_impl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE_IMPL(net, net_impl);  // net: a shared handle to net_impl

// ---- sluice batch -> tensors, no copy: "data" is float {n, 1, 28, 28} (collate's .shape),
// "label" int64 {n}. The exports hold the slot; the handle lets go of it here.
struct batch_tensors {
  torch::Tensor images, labels;
};

batch_tensors to_tensors(sluice::batch&& b) {
  batch_tensors t{at::fromDLPack(sluice::to_dlpack(b, "data")), at::fromDLPack(sluice::to_dlpack(b, "label"))};
  b.reset();
  return t;
}

// Counts the batches whose tensors have all died. A tensor's storage expires exactly when its
// DLPack deleter runs (which drops that export's hold on the slot); the slot is back in the ring
// once both storages of its batch have expired.
struct release_count {
  struct weak_pair {
    c10::weak_intrusive_ptr<c10::StorageImpl> images, labels;
  };
  std::vector<weak_pair> alive;
  std::uint64_t released = 0;
  void track(const batch_tensors& t) {
    alive.push_back({t.images.storage().getWeakStorageImpl(), t.labels.storage().getWeakStorageImpl()});
  }
  std::uint64_t collect() {
    std::erase_if(alive, [&](const weak_pair& w) {
      const bool gone = w.images.expired() && w.labels.expired();
      released += gone ? 1 : 0;
      return gone;
    });
    return released;
  }
};

struct options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::uint64_t epochs = 1, max_steps = 0, batch = 64, workers = 2, seed = 7, threads = 1;
  double lr = 0.01;
  bool check = false;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--check") { o.check = true; continue; }
    if (i + 1 >= argc) throw sluice::usage_error("libtorch_trainer: " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--data") o.data = v;
    else if (k == "--epochs") o.epochs = std::stoull(v);
    else if (k == "--max-steps") o.max_steps = std::stoull(v);
    else if (k == "--batch") o.batch = std::stoull(v);
    else if (k == "--workers") o.workers = std::stoull(v);
    else if (k == "--seed") o.seed = std::stoull(v);
    else if (k == "--threads") o.threads = std::stoull(v);
    else if (k == "--lr") o.lr = std::stod(v);
    else throw sluice::usage_error("libtorch_trainer: unknown option " + k);
  }
  return o;
}

double evaluate(net& model, const sluice::io::idx_reader& test, std::vector<std::int64_t>& correct, std::vector<std::int64_t>& total) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto loader = sluice::from(sluice::sample::sequential{test.size()}) | sluice::read(test) |
                sluice::collate({.batch = 500, .output = sluice::dtype::f32, .mean = {0.286f}, .std = {0.353f},
                                 .shape = {1, 28, 28}}) |
                sluice::prefetch(2, {.workers = 1});
  std::int64_t right = 0, all = 0;
  for (auto& b : loader.epoch(0)) {
    auto t = to_tensors(std::move(b));
    auto pred = model->forward(t.images).argmax(1);
    auto hit = pred.eq(t.labels);
    for (std::int64_t i = 0; i < t.labels.size(0); ++i) {
      const auto c = t.labels[i].item<std::int64_t>();
      ++total[c];
      correct[c] += hit[i].item<bool>() ? 1 : 0;
    }
    right += hit.sum().item<std::int64_t>();
    all += t.labels.size(0);
  }
  model->train();
  return all > 0 ? static_cast<double>(right) / static_cast<double>(all) : 0.0;
}

int run(int argc, char** argv) {
  const options o = parse(argc, argv);
  torch::manual_seed(o.seed);
  torch::set_num_threads(static_cast<int>(o.threads));
  std::vector<std::int64_t> keep(10);
  for (int c = 0; c < 10; ++c) keep[c] = std::llround(6000.0 * std::pow(100.0, -c / 9.0));
  const sluice::io::idx_reader all_train{o.data + "/train-images-idx3-ubyte.gz", o.data + "/train-labels-idx1-ubyte.gz"};
  const sluice::io::idx_reader test{o.data + "/t10k-images-idx3-ubyte.gz", o.data + "/t10k-labels-idx1-ubyte.gz"};
  const long_tailed_subset train{all_train, keep};
  std::printf("long-tailed Fashion-MNIST: %zu training images (class 0: %lld ... class 9: %lld), %zu test images\n",
              train.size(), static_cast<long long>(keep[0]), static_cast<long long>(keep[9]), test.size());

  auto loader = sluice::from(sluice::sample::shuffle{train.size(), {.seed = o.seed}}) | sluice::read(train) |
                sluice::collate({.batch = o.batch, .drop_last = true, .output = sluice::dtype::f32,
                                 .mean = {0.286f}, .std = {0.353f}, .shape = {1, 28, 28}}) |
                sluice::prefetch(2, {.workers = o.workers, .seed = o.seed});

  net model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  std::uint64_t step = 0, delivered = 0;
  std::vector<double> losses;
  release_count releases;
  for (std::uint64_t e = 0; e < o.epochs && (o.max_steps == 0 || step < o.max_steps); ++e) {
    for (auto& b : loader.epoch(e)) {
      ++delivered;
      auto t = to_tensors(std::move(b));  // b is now empty; the tensors hold the slot
      releases.track(t);
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(t.images), t.labels);
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item<double>());
      if (++step % 50 == 0) std::printf("epoch %llu step %llu loss %.4f\n", static_cast<unsigned long long>(e),
                                        static_cast<unsigned long long>(step), losses.back());
      if (o.max_steps != 0 && step >= o.max_steps) break;
    }  // t dies here: the slot returns to the ring before the next batch is awaited
  }
  const auto st = loader.stats();
  std::vector<std::int64_t> correct(10, 0), total(10, 0);
  const std::uint64_t released_in_training = releases.collect();
  const double acc = evaluate(model, test, correct, total);
  const std::size_t k = std::min<std::size_t>(20, losses.size() / 2);
  const double first = k ? std::accumulate(losses.begin(), losses.begin() + static_cast<std::ptrdiff_t>(k), 0.0) / k : 0;
  const double last = k ? std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(k), losses.end(), 0.0) / k : 0;
  std::printf("%llu steps; mean loss of the first %zu steps %.4f, of the last %zu %.4f\n",
              static_cast<unsigned long long>(step), k, first, k, last);
  std::printf("test accuracy %.3f; per class:", acc);
  for (int c = 0; c < 10; ++c) std::printf(" %.2f", total[c] ? static_cast<double>(correct[c]) / total[c] : 0.0);
  std::printf("\nsluice: %llu batches, stall fraction %.3f, wait p95 %.2f ms, batches released %llu of %llu\n",
              static_cast<unsigned long long>(st.batches), st.stall_fraction, st.wait_p95_ns / 1e6,
              static_cast<unsigned long long>(released_in_training), static_cast<unsigned long long>(delivered));
  if (o.check) {
    bool ok = true;
    if (!(k > 0 && last < first)) {
      std::fprintf(stderr, "check failed: the loss did not fall\n");
      ok = false;
    }
    if (released_in_training != delivered) {
      std::fprintf(stderr, "check failed: %llu batches delivered but %llu released by their tensors\n",
                   static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(released_in_training));
      ok = false;
    }
    if (!(acc > 0.3)) {
      std::fprintf(stderr, "check failed: test accuracy %.3f is no better than guessing the head classes\n", acc);
      ok = false;
    }
    return ok ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_trainer: %s\n", e.what());
    return 1;
  }
}
