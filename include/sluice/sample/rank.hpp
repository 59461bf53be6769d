// sluice/sample/rank.hpp — which rank this process is, and how many there are.
//
// rank_from_environment() reads what the launcher set: torchrun (RANK, WORLD_SIZE, ...), Open MPI
// (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS, ...) or PMI/PMIx (PMI_RANK or PMIX_RANK,
// PMI_SIZE); nothing set is rank 0 of 1. torchrun's and Open MPI's name the process itself, so
// Slurm is read only when neither is set, and PMI only when Slurm is not either; rank_info::of
// takes explicit values.
// Errors: a value that is not a plain decimal number, a rank not below the world size, a world of
// 0, half a pair, PMIX_RANK without PMI_SIZE, or two launchers that disagree is a usage_error
// naming the variable and its value: never a silent fallback to rank 0, which would make every
// rank read the same data.
// Threads: reads the environment with std::getenv; call it at start-up, not concurrently with
// setenv. Every rule: docs/samplers.md.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/core/error.hpp"
#include "sluice/sample/distributed.hpp"

namespace sluice::sample {

// Where the rank came from (for logs and error messages).
enum class rank_source : std::uint8_t { single_process, explicit_values, torchrun, open_mpi, slurm, pmi };

[[nodiscard]] constexpr const char* rank_source_name(rank_source s) noexcept {
  switch (s) {
    case rank_source::single_process: return "single process";
    case rank_source::explicit_values: return "explicit values";
    case rank_source::torchrun: return "torchrun (RANK/WORLD_SIZE)";
    case rank_source::open_mpi: return "Open MPI (OMPI_COMM_WORLD_*)";
    case rank_source::slurm: return "Slurm (SLURM_PROCID/SLURM_NTASKS)";
    case rank_source::pmi: return "PMI (PMI_RANK/PMI_SIZE)";
  }
  return "?";
}

// What distributed() needs beyond (rank, world): how to treat the tail and where to start.
struct rank_split_options {
  sample::tail tail = tail::pad;
  std::uint64_t start = 0;  // global position to start at (resume)
};

struct rank_info {
  std::uint64_t rank = 0;
  std::uint64_t world = 1;
  std::uint64_t local_rank = 0;   // rank among the processes of this machine
  std::uint64_t local_world = 1;  // processes on this machine
  rank_source source = rank_source::single_process;

  // Explicit values, checked: world >= 1, rank < world, local_rank < local_world.
  [[nodiscard]] static rank_info of(std::uint64_t rank, std::uint64_t world, std::uint64_t local_rank = 0,
                                    std::uint64_t local_world = 1) {
    if (world == 0) throw usage_error("sluice: rank_info: world must be at least 1");
    if (rank >= world)
      throw usage_error("sluice: rank_info: rank " + std::to_string(rank) + " is not below world " +
                        std::to_string(world));
    if (local_world == 0 || local_rank >= local_world)
      throw usage_error("sluice: rank_info: local rank " + std::to_string(local_rank) + " is not below local world " +
                        std::to_string(local_world));
    return {rank, world, local_rank, local_world, rank_source::explicit_values};
  }

  [[nodiscard]] bool is_main() const noexcept { return rank == 0; }

  // Options for sample::distributed for this rank.
  [[nodiscard]] distributed_options distributed(rank_split_options o = {}) const noexcept {
    return {.rank = rank, .world = world, .tail = o.tail, .start = o.start};
  }

  friend bool operator==(const rank_info&, const rank_info&) = default;
};

namespace detail {

// The value of `name` as an unsigned decimal number; nullopt when unset. Empty, signed, non-digit
// or overflowing values are errors naming the variable.
[[nodiscard]] inline std::optional<std::uint64_t> env_number(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr) return std::nullopt;
  const std::string_view v(raw);
  auto bad = [&](const char* why) {
    return usage_error(std::string("sluice: environment variable ") + name + "='" + std::string(v) + "' " + why);
  };
  if (v.empty()) throw bad("is empty (expected a non-negative integer)");
  std::uint64_t x = 0;
  for (char c : v) {
    if (c < '0' || c > '9') throw bad("is not a non-negative integer");
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (x > (UINT64_MAX - d) / 10) throw bad("is too large");
    x = x * 10 + d;
  }
  return x;
}

struct launcher_vars {
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;  // nullptr: not in the environment
  rank_source source;
};

// One launcher's view, or nullopt when it set neither rank nor world.
[[nodiscard]] inline std::optional<rank_info> rank_from(const launcher_vars& v) {
  const auto rank = env_number(v.rank);
  const auto world = env_number(v.world);
  if (!rank && !world) return std::nullopt;
  if (!rank || !world)
    throw usage_error(std::string("sluice: ") + (rank ? v.rank : v.world) + " is set but " +
                      (rank ? v.world : v.rank) + " is not; a launcher sets both");
  if (*world == 0) throw usage_error(std::string("sluice: ") + v.world + "=0: the world needs at least one rank");
  if (*rank >= *world)
    throw usage_error(std::string("sluice: ") + v.rank + "=" + std::to_string(*rank) + " is not below " + v.world +
                      "=" + std::to_string(*world));
  const auto local_rank = env_number(v.local_rank);
  const auto local_world = v.local_world != nullptr ? env_number(v.local_world) : std::nullopt;
  rank_info r{*rank, *world, local_rank.value_or(0), local_world.value_or(1), v.source};
  // Without LOCAL_WORLD_SIZE, one process per machine is assumed only if that fits LOCAL_RANK.
  if (local_rank && !local_world) r.local_world = *local_rank + 1;
  if (r.local_world == 0 || r.local_rank >= r.local_world)
    throw usage_error(std::string("sluice: ") + v.local_rank + "=" + std::to_string(r.local_rank) + " is not below " +
                      (v.local_world != nullptr ? v.local_world : "the local world") + "=" + std::to_string(r.local_world));
  return r;
}

}  // namespace detail

// Rank and world from the launcher's environment; rank 0 of 1 when no launcher set any.
[[nodiscard]] inline rank_info rank_from_environment() {
  const auto torch = detail::rank_from({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", rank_source::torchrun});
  const auto mpi = detail::rank_from({"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE", rank_source::open_mpi});
  if (torch && mpi && (torch->rank != mpi->rank || torch->world != mpi->world))
    throw usage_error("sluice: the environment names two different ranks: RANK/WORLD_SIZE = " +
                      std::to_string(torch->rank) + "/" + std::to_string(torch->world) +
                      " but OMPI_COMM_WORLD_RANK/SIZE = " + std::to_string(mpi->rank) + "/" +
                      std::to_string(mpi->world) + "; unset one or pass rank_info::of(rank, world)");
  if (torch) return *torch;
  if (mpi) return *mpi;
  // Slurm: SLURM_NTASKS_PER_NODE is "4", or "2(x3),1" on uneven nodes; only a plain number is a
  // local world (else LOCAL_RANK + 1 is assumed, as for the other launchers).
  const char* per_node = std::getenv("SLURM_NTASKS_PER_NODE");
  const bool plain_per_node = per_node != nullptr && *per_node != '\0' &&
                              std::string_view(per_node).find_first_not_of("0123456789") == std::string_view::npos;
  if (auto slurm = detail::rank_from({"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                      plain_per_node ? "SLURM_NTASKS_PER_NODE" : nullptr,
                                      rank_source::slurm}))
    return *slurm;
  const bool pmix = std::getenv("PMI_RANK") == nullptr && std::getenv("PMIX_RANK") != nullptr;
  if (pmix && std::getenv("PMI_SIZE") == nullptr)
    throw usage_error("sluice: PMIX_RANK is set but no world size is (PMI_SIZE); PMIx keeps the size out of the "
                      "environment: pass it (rank_info::of(rank, world), or world_size= in Python)");
  if (auto pmi = detail::rank_from({pmix ? "PMIX_RANK" : "PMI_RANK", "PMI_SIZE", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE",
                                    rank_source::pmi}))
    return *pmi;
  return {};
}

}  // namespace sluice::sample
