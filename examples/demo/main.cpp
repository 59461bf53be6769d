// sluice-demo — does the sampler matter more than the loader? Long-tailed Fashion-MNIST (a
// balanced validation set of 500 images a class is held out first; from the rest, class c keeps
// round(5500 * 100^(-c/9)) training images), a small model trained on the CPU once per sampler, fed
// by a sluice pipeline: uniform, class weights 1/log(1+n), class weights 1/n, and deferred
// re-sampling. Each run keeps the epoch with the best validation accuracy; the test set is
// evaluated once, at the end, with those weights (and once with the last epoch's, for reference).
// Every diagnostic is on: data stalls, step time, class balance of the batches, drift, memory, the
// advisor's verdicts (fed the validation loss).
// Writes report.json, trace.json (Perfetto / chrome://tracing), epochs.csv, advisor-<run>.csv and
// plot.png into --out. See README.md beside this file.
#include <sluice/diag/advisor.hpp>
#include <sluice/diag/class_balance.hpp>
#include <sluice/diag/drift.hpp>
#include <sluice/diag/json.hpp>
#include <sluice/diag/noise_scale.hpp>
#include <sluice/diag/proc_probe.hpp>
#include <sluice/diag/report.hpp>
#include <sluice/diag/trace.hpp>
#include <sluice/io/idx.hpp>
#include <sluice/sluice.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "fashion_data.hpp"
#include "model.hpp"
#include "samplers.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
namespace diag = sluice::diag;

struct options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "out/demo";
  std::size_t epochs = 6;
  bool epochs_set = false;
  std::size_t batch = 64;
  std::size_t hidden = 128;
  std::size_t workers = 1;
  std::size_t depth = 2;
  double imbalance = 100;
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  std::uint64_t seed = 7;
  unsigned loader_delay_us = 0;
  bool keep_batches = false;  // the trainer keeps a copy of every batch: a leak for R4a to find
  long shift = -1;  // -1: 1 pixel on the long-tailed set, 0 with --full
  bool full = false;
  bool quick = false;
  bool plot = true;
  std::string only;  // "uniform", "invlog", "balanced", "deferred" or "loss_aware": run one
  long deferred = -1;  // > 0: a fourth run, uniform then class-balanced from this epoch (1-based);
                       // -1: epochs / 2 + 1 (none with --quick); 0: none
  long validation_per_class = -1;  // -1: 500 (100 with --quick)
  long eval_every = -1;  // validation every N steps as well as at each epoch's end (-1: 50; --quick: 0, off)
  double loss_share = 0.5;  // loss_aware run: share of the draws by recent loss (the rest uniform)
  std::vector<double> targets{0.70, 0.75, 0.80};  // balanced validation accuracies to count steps to
};

[[noreturn]] void usage(int rc) {
  std::printf(
      "usage: sluice-demo [options]\n"
      "  --data DIR         Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist);\n"
      "                     a generated stand-in is used when they are missing\n"
      "  --out DIR          where report.json, trace.json, epochs.csv, plot.png go (out/demo)\n"
      "  --epochs N         epochs per run (6; --quick: 2)\n"
      "  --model mlp|softmax  one hidden layer of --hidden units (128), or softmax regression\n"
      "  --hidden N  --batch N (64)  --lr X (0.05, cosine-decayed to 0)  --momentum X (0.9)  --seed N (7)\n"
      "  --workers N (1)  --depth N (2)   loader worker threads and prefetch depth\n"
      "  --shift N          augmentation: random translation by up to N pixels (1 on the long-tailed set,\n"
      "                     0 with --full)\n"
      "  --imbalance X      largest/smallest class size in the long-tailed set (100)\n"
      "  --val-per-class N  validation images held out per class before the long tail is drawn\n"
      "                     (500; --quick: 100); model selection uses them, never the test set\n"
      "  --full             train on the whole balanced training set instead (one run, uniform)\n"
      "  --only uniform|invlog|balanced|deferred|loss_aware   one of the runs (invlog: class weights\n"
      "                     1/log(1+n); balanced: 1/n; loss_aware: sluice::sample::loss_aware fed each\n"
      "                     sample's loss by the trainer)\n"
      "  --loss-share X     loss_aware: share of the draws by recent loss, the rest uniform (0.5)\n"
      "  --eval-every N     also evaluate validation every N steps, for steps-to-target (50; --quick: 0)\n"
      "  --deferred E       run 'deferred': uniform, then class-balanced (1/n) from epoch E on\n"
      "                     (deferred re-sampling; default epochs/2+1, 0: not run); the drift\n"
      "                     monitor sees the switch\n"
      "  --loader-delay-us N  busy-wait N us per sample in the loader (an expensive decode stand-in,\n"
      "                     to see stalls and the advisor react)\n"
      "  --keep-batches     the trainer keeps a copy of every batch it trained on (the classic leak of a\n"
      "                     training loop that logs its inputs), to see RSS grow and the advisor react\n"
      "  --quick            softmax regression, 2 epochs, 2,000 test images, 100 validation images a\n"
      "                     class, no deferred run: a smoke test\n"
      "  --no-plot          skip the gnuplot PNG\n");
  std::exit(rc);
}

options parse(int argc, char** argv) {
  options o;
  bool model_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "sluice-demo: %s needs a value\n", a.c_str()); usage(2); }
      return argv[++i];
    };
    if (a == "--data") o.data = next();
    else if (a == "--out") o.out = next();
    else if (a == "--epochs") { o.epochs = std::stoul(next()); o.epochs_set = true; }
    else if (a == "--batch") o.batch = std::stoul(next());
    else if (a == "--hidden") o.hidden = std::stoul(next());
    else if (a == "--workers") o.workers = std::stoul(next());
    else if (a == "--depth") o.depth = std::stoul(next());
    else if (a == "--imbalance") o.imbalance = std::stod(next());
    else if (a == "--lr") o.lr = std::stof(next());
    else if (a == "--momentum") o.momentum = std::stof(next());
    else if (a == "--seed") o.seed = std::stoull(next());
    else if (a == "--deferred") o.deferred = std::stol(next());
    else if (a == "--val-per-class") o.validation_per_class = std::stol(next());
    else if (a == "--eval-every") o.eval_every = std::stol(next());
    else if (a == "--loss-share") o.loss_share = std::stod(next());
    else if (a == "--shift") o.shift = std::stol(next());
    else if (a == "--loader-delay-us") o.loader_delay_us = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--keep-batches") o.keep_batches = true;
    else if (a == "--model") {
      std::string m = next();
      model_set = true;
      if (m == "softmax") o.hidden = 0;
      else if (m != "mlp") usage(2);
    } else if (a == "--full") o.full = true;
    else if (a == "--quick") o.quick = true;
    else if (a == "--no-plot") o.plot = false;
    else if (a == "--only") {
      o.only = next();
      if (o.only != "uniform" && o.only != "invlog" && o.only != "balanced" && o.only != "deferred" && o.only != "loss_aware") usage(2);
    } else if (a == "-h" || a == "--help") usage(0);
    else { std::fprintf(stderr, "sluice-demo: unknown option %s\n", a.c_str()); usage(2); }
  }
  if (o.quick) {
    if (!o.epochs_set) o.epochs = 2;
    if (!model_set) o.hidden = 0;
  }
  if (o.shift < 0) o.shift = o.full ? 0 : 1;
  if (o.validation_per_class < 0) o.validation_per_class = o.quick ? 100 : 500;
  if (o.eval_every < 0) o.eval_every = o.quick ? 0 : 50;
  if (o.deferred < 0) o.deferred = o.quick ? 0 : static_cast<long>(o.epochs / 2 + 1);
  if (o.validation_per_class == 0 || o.deferred > static_cast<long>(o.epochs)) usage(2);
  if (o.epochs == 0 || o.batch == 0 || o.workers == 0 || o.depth == 0) usage(2);
  return o;
}

// An evaluation set as floats in [0, 1], loaded once: the test set, or the validation images
// held out of the training set.
struct eval_set {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::size_t n = 0;
};

eval_set load_eval(const sluice::io::idx_reader& r, std::span<const std::uint64_t> ids) {
  eval_set e;
  e.n = ids.size();
  e.x.resize(e.n * r.record_bytes());
  e.y.resize(e.n);
  for (std::size_t i = 0; i < e.n; ++i) {
    auto rec = r.record(ids[i]);
    for (std::size_t k = 0; k < rec.size(); ++k)
      e.x[i * rec.size() + k] = static_cast<float>(static_cast<std::uint8_t>(rec[k])) * (1.0f / 255.0f);
    e.y[i] = r.label(ids[i]);
  }
  return e;
}

eval_set load_eval(const sluice::io::idx_reader& r, std::size_t limit) {
  eval_set e;
  e.n = std::min(limit, r.size());
  e.x.resize(e.n * r.record_bytes());
  e.y.resize(e.n);
  for (std::size_t i = 0; i < e.n; ++i) {
    auto rec = r.record(i);
    for (std::size_t k = 0; k < rec.size(); ++k)
      e.x[i * rec.size() + k] = static_cast<float>(static_cast<std::uint8_t>(rec[k])) * (1.0f / 255.0f);
    e.y[i] = r.label(i);
  }
  return e;
}

struct eval_result {
  double loss = 0, accuracy = 0, balanced_accuracy = 0;
  std::array<double, demo::classes> per_class{};
};

eval_result evaluate(demo::model& m, const eval_set& e) {
  eval_result r;
  std::array<std::size_t, demo::classes> total{}, right{};
  const std::size_t chunk = 500, d = e.x.size() / std::max<std::size_t>(e.n, 1);
  double loss = 0;
  for (std::size_t s = 0; s < e.n; s += chunk) {
    const std::size_t b = std::min(chunk, e.n - s);
    loss += m.forward(e.x.data() + s * d, b, e.y.data() + s) * static_cast<double>(b);
    auto p = m.probabilities(b);
    for (std::size_t i = 0; i < b; ++i) {
      const auto* row = p.data() + i * demo::classes;
      const auto pred = static_cast<std::int64_t>(std::max_element(row, row + demo::classes) - row);
      const auto c = static_cast<std::size_t>(e.y[s + i]);
      ++total[c];
      right[c] += pred == e.y[s + i];
    }
  }
  r.loss = loss / static_cast<double>(e.n);
  std::size_t all_right = 0, seen = 0;
  double sum = 0;
  for (std::size_t c = 0; c < demo::classes; ++c) {
    all_right += right[c];
    r.per_class[c] = total[c] ? static_cast<double>(right[c]) / static_cast<double>(total[c]) : 0;
    if (total[c]) { sum += r.per_class[c]; ++seen; }
  }
  r.accuracy = static_cast<double>(all_right) / static_cast<double>(e.n);
  r.balanced_accuracy = seen ? sum / static_cast<double>(seen) : 0;
  return r;
}

struct epoch_record {
  std::size_t epoch = 0;
  double train_loss = 0;
  eval_result validation;  // the held-out validation images; the test set is not looked at per epoch
  double stall_fraction = 0, samples_per_second = 0, seconds = 0, step_mean_ms = 0, step_std_ms = 0;
  diag::class_balance_summary balance;
  diag::epoch_memory memory;
  double drift_sigma = diag::unmeasured;
  diag::epoch_observation observation;
  std::vector<diag::recommendation> advice;
};

struct run_record {
  std::string name, sampler;
  std::vector<epoch_record> epochs;
  std::size_t selected_epoch = 0;  // best validation accuracy (the first of equals)
  eval_result test_selected;       // the test set, with the selected epoch's weights
  eval_result test_last;           // the test set, with the last epoch's weights (for reference)
  std::size_t test_evaluations = 0;
  sluice::pipeline_stats pipeline;
  diag::noise_scale_verdict noise;
  std::vector<diag::drift_window> drift;
  double seconds = 0;
  // Balanced validation accuracy against training steps: every --eval-every steps and at each
  // epoch's end (for steps to a target accuracy).
  std::vector<std::size_t> curve_steps;
  std::vector<double> curve_accuracy;
  std::size_t feedback_batches = 0;  // batches whose per-sample losses went back to the sampler
  // The first step at which the curve reaches `target` (0: never).
  [[nodiscard]] std::size_t steps_to(double target) const {
    for (std::size_t i = 0; i < curve_steps.size(); ++i)
      if (curve_accuracy[i] >= target) return curve_steps[i];
    return 0;
  }
};

void progress(bool tty, const std::string& run, std::size_t epoch, std::size_t done, std::size_t total, double loss) {
  if (!tty) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(static_cast<double>(width) * static_cast<double>(done) / static_cast<double>(total)) : width;
  std::printf("\r  %-8s epoch %zu [", run.c_str(), epoch + 1);
  for (int i = 0; i < width; ++i) std::putchar(i < filled ? '#' : '.');
  std::printf("] %zu/%zu  loss %.3f ", done, total, loss);
  std::fflush(stdout);
}

// Random translation by up to `max_shift` pixels, drawn from counter_rng(seed, epoch, id): the same
// sample in the same epoch moves the same way whichever worker handles it. Written straight into
// the batch slot by collate (a deferred sample), so the augmentation costs no extra copy.
struct shifted_image {
  std::uint64_t id = 0;
  std::int64_t label = -1;
  std::span<const std::byte> pixels;
  std::size_t rows = 28, cols = 28;
  int dy = 0, dx = 0;
  [[nodiscard]] std::size_t size_bytes() const noexcept { return pixels.size(); }
  void write_into(std::span<std::byte> dst, const sluice::sample_context&) const noexcept {
    const auto r = static_cast<int>(rows), c = static_cast<int>(cols);
    for (int y = 0; y < r; ++y) {
      const int sy = y - dy;
      for (int x = 0; x < c; ++x) {
        const int sx = x - dx;
        dst[static_cast<std::size_t>(y * c + x)] =
            (sy >= 0 && sy < r && sx >= 0 && sx < c) ? pixels[static_cast<std::size_t>(sy * c + sx)] : std::byte{0};
      }
    }
  }
};

void busy_wait_us(unsigned us) {
  const auto until = clock_type::now() + std::chrono::microseconds(us);
  while (clock_type::now() < until) {
  }
}

// Measures the gradient noise scale at the trained weights: |G_B|^2 at two batch sizes, from
// batches drawn by the run's own sampler in the epoch just trained (so it is the noise of the
// gradient this run follows). Unaugmented images: the measurement needs no pipeline.
template <class Sampler>
diag::noise_scale_verdict measure_noise_scale(demo::model& m, const Sampler& sampler, const sluice::io::idx_reader& train,
                                             std::size_t batch, std::size_t measurements, std::uint64_t epoch) {
  const std::size_t b_small = std::max<std::size_t>(8, batch / 4), b_big = batch * 8;
  diag::noise_scale_estimator est({.b_small = static_cast<double>(b_small), .b_big = static_cast<double>(b_big)});
  const std::size_t d = train.record_bytes();
  std::vector<float> x(b_big * d);
  std::vector<std::int64_t> y(b_big);
  std::uint64_t pos = 0;
  auto draw = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i, ++pos) {
      const auto id = static_cast<std::size_t>(sampler.at(epoch, pos % sampler.size(epoch)));
      auto rec = train.record(id);
      for (std::size_t k = 0; k < d; ++k) x[i * d + k] = static_cast<float>(static_cast<std::uint8_t>(rec[k])) * (1.0f / 255.0f);
      y[i] = train.label(id);
    }
  };
  for (std::size_t k = 0; k < measurements; ++k) {
    draw(b_small);
    m.forward(x.data(), b_small, y.data());
    const double sq_small = m.backward(x.data(), b_small, y.data());
    draw(b_big);
    m.forward(x.data(), b_big, y.data());
    const double sq_big = m.backward(x.data(), b_big, y.data());
    est.add(sq_small, sq_big);
  }
  return est.verdict(static_cast<double>(batch));
}

template <class Sampler>
run_record train_run(const std::string& name, const std::string& sampler_name, Sampler sampler,
                     const sluice::io::idx_reader& train, const eval_set& validation, const eval_set& test,
                     const options& o,
                     diag::trace_recorder& trace, std::ofstream& epochs_csv) {
  run_record run;
  run.name = name;
  run.sampler = sampler_name;
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  const unsigned delay = o.loader_delay_us;
  const Sampler sampler_copy = sampler;
  // A sampler that learns from the training signal (sluice::sample::loss_aware) gets each batch's
  // per-sample losses; its copies share one state, so feeding this copy reaches the loader's.
  Sampler feedback_handle = sampler;
  constexpr bool takes_feedback = requires(Sampler& s, std::span<const std::uint64_t> ids, std::span<const float> l) {
    s.feedback(ids, l);
  };
  std::size_t global_step = 0;
  auto loader = sluice::from(std::move(sampler)) | sluice::read(train) |
                sluice::map([delay, shift = static_cast<int>(o.shift), rows = train.rows(), cols = train.cols(),
                             tr = &trace, bsz = o.batch, n = sampler_copy.size(0)](
                                sluice::record_view r, const sluice::sample_context& ctx) {
                  // A worker fills a batch's samples in order on one thread: one trace event per
                  // batch per worker row, from its first sample to its last.
                  thread_local clock_type::time_point batch_begin;
                  thread_local bool named = false;
                  if (!named) { tr->name_thread("loader worker"); named = true; }
                  if (ctx.position % bsz == 0) batch_begin = clock_type::now();
                  if (delay) busy_wait_us(delay);
                  shifted_image s{r.id, r.label, r.data, rows, cols};
                  if (shift > 0) {
                    sluice::counter_rng g(ctx.seed, ctx.epoch, ctx.id);
                    s.dy = static_cast<int>(g.below(2 * shift + 1)) - shift;
                    s.dx = static_cast<int>(g.below(2 * shift + 1)) - shift;
                  }
                  if (ctx.position % bsz == bsz - 1 || ctx.position + 1 == n)
                    tr->complete("fill_batch", batch_begin, clock_type::now());
                  return s;
                }) |
                sluice::collate({.batch = o.batch, .output = sluice::dtype::f32}) |
                sluice::prefetch(o.depth, {.workers = o.workers, .seed = o.seed});

  demo::model model(train.record_bytes(), o.hidden, demo::classes, o.seed);
  demo::model selected = model;  // the weights of the epoch with the best validation accuracy
  double best_validation = -1;
  diag::class_balance_monitor balance(demo::classes);
  diag::drift_monitor drift(1);
  diag::epoch_memory_log memory;
  std::vector<diag::epoch_observation> history;
  std::vector<std::vector<float>> kept_batches;  // only with --keep-batches: grows every step
  std::map<std::string, std::string> said;
  sluice::pipeline_stats before = loader.stats();
  const auto run_start = clock_type::now();
  trace.name_thread("trainer");

  for (std::size_t e = 0; e < o.epochs; ++e) {
    balance.reset();
    const auto epoch_start = clock_type::now();
    auto last_end = epoch_start;
    double loss_sum = 0;
    std::size_t steps = 0, samples = 0;
    auto range = loader.epoch(e);
    std::size_t total_batches = 0;
    for (auto& b : range) {
      const auto t0 = clock_type::now();
      trace.complete("wait_for_batch", last_end, t0);
      if (total_batches == 0) total_batches = range.size();
      auto x = b.template data<float>();
      auto y = b.labels();
      balance.observe_batch(y);
      drift.observe_batch(x, b.size());
      // Cosine learning-rate decay over the whole run: the last epochs settle instead of bouncing.
      const double progress_frac = (static_cast<double>(e) + static_cast<double>(steps) / std::max<double>(1, static_cast<double>(total_batches))) /
                                   static_cast<double>(o.epochs);
      const float lr = static_cast<float>(o.lr * 0.5 * (1 + std::cos(3.141592653589793 * progress_frac)));
      const float loss = model.train_step(x.data(), b.size(), y.data(), lr, o.momentum, o.weight_decay);
      if constexpr (takes_feedback) {
        feedback_handle.feedback(b.ids(), model.sample_losses());  // applies from the next epoch
        ++run.feedback_batches;
      }
      ++global_step;
      if (o.eval_every > 0 && global_step % static_cast<std::size_t>(o.eval_every) == 0 && steps + 1 < total_batches) {
        auto s = trace.scope("evaluate validation");
        run.curve_steps.push_back(global_step);
        run.curve_accuracy.push_back(evaluate(model, validation).balanced_accuracy);
      }
      if (o.keep_batches) kept_batches.emplace_back(x.begin(), x.end());
      loss_sum += loss;
      ++steps;
      samples += b.size();
      last_end = clock_type::now();
      trace.complete("train_step", t0, last_end);
      if (steps % 4 == 0) {
        diag::record_pipeline_counters(trace, loader.stats(), last_end);
      }
      if (steps % 8 == 0) progress(tty, name, e, steps, total_batches, loss_sum / static_cast<double>(steps));
    }
    const auto train_end = clock_type::now();
    epoch_record rec;
    rec.epoch = e;
    rec.train_loss = steps ? loss_sum / static_cast<double>(steps) : 0;
    rec.seconds = std::chrono::duration<double>(train_end - epoch_start).count();
    rec.samples_per_second = rec.seconds > 0 ? static_cast<double>(samples) / rec.seconds : 0;
    {
      auto s = trace.scope("evaluate validation");
      rec.validation = evaluate(model, validation);
    }
    run.curve_steps.push_back(global_step);
    run.curve_accuracy.push_back(rec.validation.balanced_accuracy);
    // Model selection on the validation set: the validation set is balanced, so its accuracy is
    // its balanced accuracy.
    if (rec.validation.balanced_accuracy > best_validation) {
      best_validation = rec.validation.balanced_accuracy;
      run.selected_epoch = e;
      selected = model;
    }
    // This epoch's share of the loader's cumulative counters.
    const auto after = loader.stats();
    const double wait = static_cast<double>(after.consumer_wait_ns - before.consumer_wait_ns);
    const double busy = static_cast<double>(after.consumer_busy_ns - before.consumer_busy_ns);
    const double dsteps = static_cast<double>(after.batches - before.batches) - 1;  // first batch is warm-up
    rec.stall_fraction = wait + busy > 0 ? wait / (wait + busy) : 0;
    rec.step_mean_ms = dsteps > 0 ? (wait + busy) / dsteps / 1e6 : 0;
    rec.step_std_ms = after.step_std_ns / 1e6;  // over the run so far
    const double worker_busy = static_cast<double>(after.worker_busy_ns - before.worker_busy_ns);
    before = after;
    rec.balance = balance.summary();
    rec.memory = memory.record(e);
    if (auto* w = drift.close_window(); w && w->index > 0) rec.drift_sigma = w->max_shift_vs_previous_sigma;

    auto& ob = rec.observation;
    ob.epoch = e;
    ob.step_time_s = rec.step_mean_ms / 1e3;
    ob.step_time_std_s = rec.step_std_ms / 1e3;  // the run's step jitter so far: R7's noise band
    ob.steps = dsteps;
    ob.wait_fraction = rec.stall_fraction;
    ob.validation_loss = rec.validation.loss;
    ob.class_std = rec.balance.class_std;
    ob.workers = static_cast<double>(o.workers);
    ob.prefetch_depth = static_cast<double>(o.depth);
    ob.worker_busy_fraction = rec.seconds > 0 ? worker_busy / (static_cast<double>(o.workers) * rec.seconds * 1e9) : diag::unmeasured;
    ob.rss_bytes = static_cast<double>(rec.memory.at_end.rss_bytes);
    ob.minor_faults = static_cast<double>(rec.memory.minor_faults_in_epoch);
    ob.major_faults = static_cast<double>(rec.memory.major_faults_in_epoch);
    ob.drift_shift_sigma = rec.drift_sigma;
    // The epoch's limiting stage, from the loader's per-epoch attribution (advisor rule R5), also
    // on the trace as per-stage shares of worker time.
    if (const auto es = loader.epoch_stats(e)) {
      if (const auto b = sluice::bottleneck(*es); !b.stage.empty()) {
        ob.bottleneck_stage = std::string(b.stage);
        ob.bottleneck_share = b.share;
      }
      diag::record_epoch_counters(trace, *es);
    }
    history.push_back(ob);
    rec.advice = diag::advise(history);

    if (tty) std::printf("\r%*s\r", 90, "");
    std::printf("  %-8s epoch %zu/%zu  loss %.3f  val loss %.3f  val acc %.3f%s  stall %4.1f %%  %6.0f samples/s  class std %.2f\n",
                name.c_str(), e + 1, o.epochs, rec.train_loss, rec.validation.loss, rec.validation.balanced_accuracy,
                run.selected_epoch == e ? "*" : " ",
                100 * rec.stall_fraction, rec.samples_per_second, rec.balance.class_std);
    // Each verdict is printed when it first appears or changes (rule, severity, recommended value);
    // warnings every time. report.json has every verdict of every epoch.
    for (const auto& r : rec.advice) {
      const std::string key = r.rule + "|" + std::string(diag::to_string(r.level)) + "|" +
                              (std::isnan(r.value) ? std::string("-") : std::to_string(r.value));
      auto& last = said[r.rule];
      if (last == key && r.level != diag::severity::warning) continue;
      last = key;
      std::printf("      [%s, %s] %s\n", r.rule.c_str(), std::string(diag::to_string(r.level)).c_str(), r.message.c_str());
    }
    epochs_csv << name << ',' << e << ',' << rec.train_loss << ',' << rec.validation.loss << ',' << rec.validation.accuracy << ','
               << rec.validation.balanced_accuracy << ',' << rec.stall_fraction << ',' << rec.samples_per_second << ','
               << rec.step_mean_ms << ',' << rec.balance.class_std << ',' << rec.balance.mean_within_batch_std << ','
               << rec.memory.at_end.rss_bytes << ',' << rec.memory.minor_faults_in_epoch << ','
               << rec.memory.major_faults_in_epoch << ',' << (std::isnan(rec.drift_sigma) ? 0.0 : rec.drift_sigma) << '\n';
    run.epochs.push_back(std::move(rec));
    if (e == 0) {  // early in training, where the choice of batch size matters most
      auto s = trace.scope("noise_scale");
      run.noise = measure_noise_scale(model, sampler_copy, train, o.batch, o.quick ? 4 : 24, e);
      std::printf("      gradient noise scale after epoch 1: %s\n", run.noise.message.c_str());
    }
  }
  run.seconds = std::chrono::duration<double>(clock_type::now() - run_start).count();
  {  // The test set, once per reported model: the one selected on validation, and the last epoch's.
    auto s = trace.scope("evaluate test");
    auto on_test = [&](demo::model& m) { ++run.test_evaluations; return evaluate(m, test); };
    run.test_selected = on_test(selected);
    run.test_last = on_test(model);
  }
  run.pipeline = loader.stats();
  run.drift.assign(drift.windows().begin(), drift.windows().end());

  std::ofstream adv(o.out + "/advisor-" + name + ".csv");
  adv << "# sluice-demo run '" << name << "': one row per epoch, replayed by tests/diag/advisor_test.cpp\n"
      << diag::epoch_csv_header << '\n';
  for (const auto& ob : history) adv << diag::to_csv_row(ob) << '\n';
  return run;
}

void to_json(diag::json_writer& w, const eval_result& r) {
  w.begin_object().field("loss", r.loss).field("accuracy", r.accuracy).field("balanced_accuracy", r.balanced_accuracy)
      .array("per_class_accuracy", r.per_class).end_object();
}

void write_report(const options& o, const demo::dataset_files& files, const demo::split& split,
                  const std::vector<run_record>& runs, const diag::trace_recorder& trace) {
  const auto& kept = split.train_per_class;
  diag::json_writer w;
  w.begin_object().key("config").begin_object()
      .field("data", files.train_images).field("stand_in", files.stand_in)
      .field("model", o.hidden ? "mlp" : "softmax").field("hidden", o.hidden).field("batch", o.batch)
      .field("epochs", o.epochs).field("workers", o.workers).field("prefetch_depth", o.depth)
      .field("lr", o.lr).field("momentum", o.momentum).field("seed", o.seed)
      .field("imbalance", o.full ? 1.0 : o.imbalance).field("full", o.full)
      .field("loader_delay_us", o.loader_delay_us).field("keep_batches", o.keep_batches).field("shift", o.shift).array("train_images_per_class", kept)
      .field("validation_per_class_requested", o.validation_per_class)
      .end_object();
  // The split of the training images (fashion_data.hpp): "validation_ids_in_train_subset" counts
  // validation images that the training subset's labels also mark as kept (0 when the two are
  // disjoint), checked here on the labels the samplers get.
  std::size_t overlap = 0;
  for (auto id : split.validation_ids) overlap += split.train_labels[static_cast<std::size_t>(id)] >= 0;
  w.key("split").begin_object()
      .array("available_per_class", split.available)
      .array("validation_per_class", split.validation_per_class)
      .array("train_per_class", split.train_per_class)
      .field("validation_images", split.validation_ids.size())
      .field("validation_ids_in_train_subset", overlap)
      .end_object();
  w.key("runs").begin_array();
  for (const auto& r : runs) {
    w.begin_object().field("name", r.name).field("sampler", r.sampler).field("seconds", r.seconds)
        .field("selected_epoch", r.selected_epoch).field("test_evaluations", r.test_evaluations)
        .field("feedback_batches", r.feedback_batches)
        .array("validation_curve_steps", r.curve_steps).array("validation_curve_balanced_accuracy", r.curve_accuracy);
    {
      std::vector<std::size_t> to;
      for (double t : o.targets) to.push_back(r.steps_to(t));
      w.array("steps_to_targets", o.targets).array("steps_to_target", to);  // 0: not reached
    }
    w.key("test_selected");
    to_json(w, r.test_selected);
    w.key("test_last_epoch");
    to_json(w, r.test_last);
    w.key("epochs").begin_array();
    for (const auto& e : r.epochs) {
      w.begin_object().field("epoch", e.epoch).field("train_loss", e.train_loss);
      w.key("validation");
      to_json(w, e.validation);
      w.field("stall_fraction", e.stall_fraction)
          .field("samples_per_second", e.samples_per_second).field("seconds", e.seconds)
          .field("step_mean_ms", e.step_mean_ms).field("drift_shift_sigma", e.drift_sigma);
      w.key("class_balance");
      diag::to_json(w, e.balance);
      w.key("memory");
      diag::to_json(w, e.memory);
      w.key("observation");
      diag::to_json(w, e.observation);
      w.key("advice");
      diag::to_json(w, std::span<const diag::recommendation>(e.advice));
      w.end_object();
    }
    w.end_array().key("pipeline");
    diag::to_json(w, r.pipeline);
    w.key("noise_scale");
    diag::to_json(w, r.noise);
    w.key("drift_windows").begin_array();
    for (const auto& d : r.drift) diag::to_json(w, d);
    w.end_array().end_object();
  }
  w.end_array();
  w.key("trace").begin_object().field("events", trace.size()).field("dropped", trace.dropped()).end_object();
  w.end_object();
  diag::write_text_file(o.out + "/report.json", w.str());
}

void write_plot(const options& o, const std::vector<run_record>& runs) {
  {
    std::ofstream c(o.out + "/curves.dat");
    c << "# epoch";
    for (const auto& r : runs) c << ' ' << r.name << "_train_loss " << r.name << "_val_loss " << r.name << "_val_acc";
    c << '\n';
    for (std::size_t e = 0; e < o.epochs; ++e) {
      c << e + 1;
      for (const auto& r : runs) c << ' ' << r.epochs[e].train_loss << ' ' << r.epochs[e].validation.loss << ' ' << r.epochs[e].validation.balanced_accuracy;
      c << '\n';
    }
    std::ofstream p(o.out + "/per_class.dat");
    p << "# class";
    for (const auto& r : runs) p << ' ' << r.name;
    p << '\n';
    for (std::size_t k = 0; k < demo::classes; ++k) {
      p << '"' << demo::class_names[k] << '"';
      for (const auto& r : runs) p << ' ' << r.test_selected.per_class[k];
      p << '\n';
    }
  }
  if (!o.plot) return;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: plot.png skipped (install gnuplot-nox; the data is in curves.dat and per_class.dat)\n");
    return;
  }
  std::ofstream g(o.out + "/plot.gp");
  g << "set terminal pngcairo size 1400,520 font ',10'\n"
       "set output 'plot.png'\n"
       "set multiplot layout 1,2 title 'sluice-demo: long-tailed Fashion-MNIST, uniform vs class-weighted sampling'\n"
       "set title 'loss per epoch'\nset xrange [0.5:" << o.epochs + 0.5 << "]\nset xlabel 'epoch'\nset ylabel 'cross-entropy'\nset key top right\nset grid\n"
       "plot ";
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#d62728", "#2ca02c"};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto col = 2 + 3 * i;
    g << (i ? ", " : "") << "'curves.dat' using 1:" << col << " with linespoints lc rgb '" << colors[i % 4]
      << "' dt 2 title '" << runs[i].name << " train', 'curves.dat' using 1:" << col + 1
      << " with linespoints lc rgb '" << colors[i % 4] << "' title '" << runs[i].name << " validation'";
  }
  g << "\nset title 'test accuracy per class (epoch selected on validation)'\nset xlabel ''\nset ylabel 'accuracy'\nset yrange [0:1.15]\nset ytics 0,0.2,1\n"
       "set style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
       "set autoscale x\nset boxwidth 0.9\nset xtics rotate by -30\nset key top right\nplot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    g << (i ? ", " : "") << "'per_class.dat' using " << 2 + i << (i == 0 ? ":xtic(1)" : "") << " lc rgb '"
      << colors[i % 4] << "' title '" << runs[i].name << "'";
  }
  g << "\nunset multiplot\n";
  g.close();
  const std::string cmd = "cd '" + o.out + "' && gnuplot plot.gp";
  if (std::system(cmd.c_str()) != 0) std::printf("gnuplot failed: plot.png not written (script: %s/plot.gp)\n", o.out.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  std::filesystem::create_directories(o.out);
  const auto t_start = clock_type::now();

  demo::dataset_files files;
  if (!demo::find_files(o.data, files)) {
    std::printf("Fashion-MNIST not found in %s (install Debian's dataset-fashion-mnist, or pass --data DIR).\n"
                "Using a GENERATED STAND-IN with the same shapes: the accuracies below are not Fashion-MNIST's.\n",
                o.data.c_str());
    files = demo::make_stand_in(o.out + "/stand-in-data", o.seed);
  }
  sluice::io::idx_reader train(files.train_images, files.train_labels);
  sluice::io::idx_reader test_reader(files.test_images, files.test_labels);
  const eval_set test = load_eval(test_reader, o.quick ? 2000 : test_reader.size());

  // Validation images first, then the long tail (or, with --full, every other image) from the rest.
  const demo::split split = demo::make_split(train, o.full ? 1.0 : o.imbalance, static_cast<std::size_t>(o.validation_per_class),
                                             o.seed, o.full);
  const auto& labels = split.train_labels;
  const auto& kept = split.train_per_class;
  const eval_set validation = load_eval(train, split.validation_ids);
  std::size_t n_train = 0;
  for (auto k : kept) n_train += k;
  std::printf("sluice-demo: %s, %s training images (%s), %zu validation images (%ld a class, held out of the training "
              "images first), %zu test images; model %s; batch %zu, %zu epochs, %zu loader worker(s), prefetch depth %zu\n",
              files.stand_in ? "stand-in data" : "Fashion-MNIST", std::to_string(n_train).c_str(),
              o.full ? "full balanced set" : ("long-tailed, imbalance " + std::to_string(static_cast<int>(o.imbalance))).c_str(),
              validation.n, o.validation_per_class, test.n,
              o.hidden ? ("MLP 784-" + std::to_string(o.hidden) + "-10").c_str() : "softmax regression",
              o.batch, o.epochs, o.workers, o.depth);
  std::printf("  training images per class:");
  for (std::size_t c = 0; c < demo::classes; ++c) std::printf(" %s %zu%s", demo::class_names[c], kept[c], c + 1 < demo::classes ? "," : "\n");

  diag::trace_recorder trace({.capacity = 1 << 16});
  std::ofstream epochs_csv(o.out + "/epochs.csv");
  epochs_csv << "run,epoch,train_loss,validation_loss,validation_accuracy,validation_balanced_accuracy,stall_fraction,samples_per_second,"
                "step_mean_ms,class_std,mean_within_batch_std,rss_bytes,minor_faults,major_faults,drift_shift_sigma\n";
  std::vector<run_record> runs;
  auto wanted = [&](const char* run) { return o.only.empty() || o.only == run; };
  if (wanted("uniform"))
    runs.push_back(train_run("uniform", "uniform (seeded shuffle of the kept images)", demo::uniform_subset(labels, o.seed),
                             train, validation, test, o, trace, epochs_csv));
  if (!o.full && wanted("invlog"))
    runs.push_back(train_run("invlog", "sluice::sample::class_balanced<inverse_log>: class weights 1/log(1+n)",
                             demo::make_class_balanced<sluice::sample::inverse_log>(labels, o.seed), train, validation, test,
                             o, trace, epochs_csv));
  if (!o.full && wanted("balanced"))
    runs.push_back(train_run("balanced", "sluice::sample::class_balanced<inverse_frequency>: class weights 1/n",
                             demo::make_class_balanced<sluice::sample::inverse_frequency>(labels, o.seed), train, validation,
                             test, o, trace, epochs_csv));
  if (!o.full && (o.deferred > 0 || o.only == "deferred") && wanted("deferred")) {
    const auto at = static_cast<std::size_t>(o.deferred > 0 ? o.deferred : static_cast<long>(o.epochs / 2 + 1));
    runs.push_back(train_run("deferred", "uniform, class weights 1/n from epoch " + std::to_string(at),
                             demo::switching_sampler(demo::uniform_subset(labels, o.seed),
                                                     demo::make_class_balanced<sluice::sample::inverse_frequency>(labels, o.seed),
                                                     at - 1),
                             train, validation, test, o, trace, epochs_csv));
  }
  if (!o.full && wanted("loss_aware")) {
    std::vector<std::uint64_t> kept_ids;
    for (std::uint64_t i = 0; i < labels.size(); ++i)
      if (labels[i] >= 0) kept_ids.push_back(i);
    char share[32];
    std::snprintf(share, sizeof share, "%.2f", o.loss_share);
    runs.push_back(train_run("loss_aware",
                             std::string("sluice::sample::loss_aware: draws ") + share +
                                 " by each image's recent loss (fed back per batch), the rest uniform",
                             sluice::sample::loss_aware(labels.size(), kept_ids,
                                                        {.seed = o.seed, .uniform_share = 1 - o.loss_share}),
                             train, validation, test, o, trace, epochs_csv));
  }
  epochs_csv.close();

  // Each run's model is the epoch with the best validation accuracy ("sel."); the test set is
  // evaluated once with it, and once with the last epoch's weights for reference.
  std::printf("\n%-9s %-12s %9s %9s | %9s %9s %9s %12s | %7s %10s %8s\n", "run", "class wt", "sel.epoch", "val acc",
              "test loss", "test acc", "bal.acc", "last ep. bal", "stall", "samples/s", "seconds");
  const auto weight_name = [](const std::string& run) {
    return run == "uniform" ? "as data" : run == "invlog" ? "1/log(1+n)" : run == "balanced" ? "1/n"
         : run == "loss_aware" ? "by loss" : "deferred 1/n";
  };
  for (const auto& r : runs) {
    double stall = 0, sps = 0;
    for (const auto& e : r.epochs) {
      stall += e.stall_fraction / static_cast<double>(r.epochs.size());
      sps += e.samples_per_second / static_cast<double>(r.epochs.size());
    }
    std::printf("%-9s %-12s %9zu %9.3f | %9.3f %9.3f %9.3f %12.3f | %5.1f %% %10.0f %8.1f\n", r.name.c_str(),
                weight_name(r.name), r.selected_epoch + 1, r.epochs[r.selected_epoch].validation.balanced_accuracy,
                r.test_selected.loss, r.test_selected.accuracy, r.test_selected.balanced_accuracy,
                r.test_last.balanced_accuracy, 100 * stall, sps, r.seconds);
  }
  if (!runs.empty()) {
    std::printf("\nper-class test accuracy (epoch selected on validation)\n%-10s %6s", "class", "train");
    for (const auto& r : runs) std::printf(" %9s", r.name.c_str());
    std::printf("\n");
    for (std::size_t c = 0; c < demo::classes; ++c) {
      std::printf("%-10s %6zu", demo::class_names[c], kept[c]);
      for (const auto& r : runs) std::printf(" %9.3f", r.test_selected.per_class[c]);
      std::printf("\n");
    }
  }
  for (std::size_t i = 1; i < runs.size(); ++i) {
    if (runs[0].name != "uniform") break;
    const double u = runs[0].test_selected.balanced_accuracy, b = runs[i].test_selected.balanced_accuracy;
    std::printf("%s%-8s changes balanced test accuracy by %+.1f points over uniform (%.3f -> %.3f)%s\n", i == 1 ? "\n" : "",
                runs[i].name.c_str(), 100 * (b - u), u, b, files.stand_in ? " [stand-in data]" : "");
  }
  if (runs.size() >= 2 && !o.quick) std::printf("(the test set is balanced, 1,000 images a class: balanced accuracy equals accuracy)\n");
  if (o.eval_every > 0 && !runs.empty()) {
    // Steps (batches of --batch) until the balanced validation accuracy first reaches each target,
    // measured every --eval-every steps and at each epoch's end; "-": never within the run.
    std::printf("\nsteps to a balanced validation accuracy (validation every %ld steps and at each epoch's end)\n%-10s", o.eval_every, "run");
    for (double t : o.targets) std::printf("    >= %.2f", t);
    std::printf("\n");
    for (const auto& r : runs) {
      std::printf("%-10s", r.name.c_str());
      for (double t : o.targets) {
        if (const auto n = r.steps_to(t)) std::printf(" %10zu", n);
        else std::printf(" %10s", "-");
      }
      std::printf("\n");
    }
    for (const auto& r : runs) {
      if (r.name == "uniform" || r.name == "balanced") continue;
      for (const auto& base : runs) {
        if (base.name != "uniform" && base.name != "balanced") continue;
        std::printf("%-10s steps vs %-8s:", r.name.c_str(), base.name.c_str());
        for (double t : o.targets) {
          const auto a = r.steps_to(t), b = base.steps_to(t);
          if (a && b) std::printf("  %.2f: x%.2f", t, static_cast<double>(a) / static_cast<double>(b));
          else std::printf("  %.2f: %s", t, a ? "only it" : b ? "only base" : "neither");
        }
        std::printf("  (< 1: fewer steps)\n");
      }
    }
  }

  trace.write(o.out + "/trace.json");
  write_report(o, files, split, runs, trace);
  write_plot(o, runs);
  std::printf("\nwrote %s/{report.json, trace.json (open in https://ui.perfetto.dev), epochs.csv, advisor-*.csv%s}  in %.1f s\n",
              o.out.c_str(), o.plot ? ", plot.png" : "",
              std::chrono::duration<double>(clock_type::now() - t_start).count());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "sluice-demo: %s\n", e.what());
  return 1;
}
