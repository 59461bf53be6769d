// sample/rank.hpp: rank and world from explicit values and from the launchers' environment.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "sluice/sample/rank.hpp"
#include "sluice/sample/shuffle.hpp"

namespace {

// Sets the given variables for one test and restores the previous environment afterwards.
class env_guard {
 public:
  env_guard() {
    for (const char* name : names) {
      const char* v = std::getenv(name);
      saved_[index(name)] = v ? std::string(v) : std::string();
      had_[index(name)] = v != nullptr;
      ::unsetenv(name);
    }
  }
  ~env_guard() {
    for (const char* name : names) {
      if (had_[index(name)]) ::setenv(name, saved_[index(name)].c_str(), 1);
      else ::unsetenv(name);
    }
  }
  void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  static constexpr const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                                          "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"};
  static std::size_t index(const char* name) {
    for (std::size_t i = 0; i < std::size(names); ++i)
      if (std::string(names[i]) == name) return i;
    return 0;
  }
  std::string saved_[std::size(names)];
  bool had_[std::size(names)] = {};
};

std::string error_text(auto&& fn) {
  try {
    fn();
  } catch (const sluice::usage_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

using sluice::sample::rank_from_environment;
using sluice::sample::rank_info;
using sluice::sample::rank_source;

TEST_CASE("no launcher variables: rank 0 of 1") {
  env_guard env;
  auto r = rank_from_environment();
  CHECK(r.rank == 0);
  CHECK(r.world == 1);
  CHECK(r.local_rank == 0);
  CHECK(r.local_world == 1);
  CHECK(r.source == rank_source::single_process);
  CHECK(r.is_main());
}

TEST_CASE("torchrun's variables") {
  env_guard env;
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "1");
  env.set("LOCAL_WORLD_SIZE", "4");
  auto r = rank_from_environment();
  CHECK(r.rank == 5);
  CHECK(r.world == 8);
  CHECK(r.local_rank == 1);
  CHECK(r.local_world == 4);
  CHECK(r.source == rank_source::torchrun);
  CHECK_FALSE(r.is_main());
}

TEST_CASE("Open MPI's variables") {
  env_guard env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  auto r = rank_from_environment();
  CHECK(r == rank_info{3, 4, 3, 4, rank_source::open_mpi});
}

TEST_CASE("Slurm's variables (srun), read only where torchrun and Open MPI set nothing") {
  env_guard env;
  env.set("SLURM_PROCID", "6");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "2");
  env.set("SLURM_NTASKS_PER_NODE", "4");
  CHECK(rank_from_environment() == rank_info{6, 8, 2, 4, rank_source::slurm});
  env.set("SLURM_NTASKS_PER_NODE", "4(x2)");  // uneven nodes: no plain local world
  CHECK(rank_from_environment() == rank_info{6, 8, 2, 3, rank_source::slurm});
  // torchrun inside one Slurm task: RANK names the process, SLURM_PROCID the task.
  env.set("RANK", "13");
  env.set("WORLD_SIZE", "32");
  CHECK(rank_from_environment().rank == 13);
  CHECK(rank_from_environment().source == rank_source::torchrun);
}

TEST_CASE("half of Slurm's pair is an error naming the missing variable") {
  env_guard env;
  env.set("SLURM_PROCID", "1");
  CHECK(error_text([] { (void)rank_from_environment(); }).find("SLURM_PROCID is set but SLURM_NTASKS is not") !=
        std::string::npos);
}

TEST_CASE("PMI's and PMIx's variables") {
  env_guard env;
  env.set("PMI_RANK", "2");
  env.set("PMI_SIZE", "3");
  CHECK(rank_from_environment() == rank_info{2, 3, 0, 1, rank_source::pmi});
  ::unsetenv("PMI_RANK");
  env.set("PMIX_RANK", "1");
  CHECK(rank_from_environment() == rank_info{1, 3, 0, 1, rank_source::pmi});
  ::unsetenv("PMI_SIZE");
  const auto msg = error_text([] { (void)rank_from_environment(); });
  CHECK(msg.find("PMIX_RANK is set but no world size") != std::string::npos);
  CHECK(msg.find("PMI_SIZE") != std::string::npos);
}

TEST_CASE("LOCAL_RANK without LOCAL_WORLD_SIZE is accepted") {
  env_guard env;
  env.set("RANK", "2");
  env.set("WORLD_SIZE", "4");
  env.set("LOCAL_RANK", "2");
  auto r = rank_from_environment();
  CHECK(r.local_rank == 2);
  CHECK(r.local_world == 3);
}

TEST_CASE("both launchers agreeing is fine, disagreeing is an error naming both") {
  env_guard env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("OMPI_COMM_WORLD_RANK", "1");
  env.set("OMPI_COMM_WORLD_SIZE", "2");
  CHECK(rank_from_environment().rank == 1);
  env.set("OMPI_COMM_WORLD_RANK", "0");
  auto msg = error_text([] { (void)rank_from_environment(); });
  CHECK(msg.find("RANK/WORLD_SIZE = 1/2") != std::string::npos);
  CHECK(msg.find("OMPI_COMM_WORLD_RANK/SIZE = 0/2") != std::string::npos);
}

TEST_CASE("bad values are errors naming the variable, never a silent rank 0") {
  env_guard env;
  SUBCASE("not a number") {
    env.set("RANK", "one");
    env.set("WORLD_SIZE", "2");
    auto msg = error_text([] { (void)rank_from_environment(); });
    CHECK(msg.find("RANK='one'") != std::string::npos);
  }
  SUBCASE("negative") {
    env.set("RANK", "-1");
    env.set("WORLD_SIZE", "2");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("RANK='-1'") != std::string::npos);
  }
  SUBCASE("empty") {
    env.set("OMPI_COMM_WORLD_RANK", "");
    env.set("OMPI_COMM_WORLD_SIZE", "2");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("OMPI_COMM_WORLD_RANK=''") != std::string::npos);
  }
  SUBCASE("overflow") {
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "99999999999999999999999");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("too large") != std::string::npos);
  }
  SUBCASE("rank not below world") {
    env.set("RANK", "4");
    env.set("WORLD_SIZE", "4");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("RANK=4 is not below WORLD_SIZE=4") != std::string::npos);
  }
  SUBCASE("world of zero") {
    env.set("OMPI_COMM_WORLD_RANK", "0");
    env.set("OMPI_COMM_WORLD_SIZE", "0");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("OMPI_COMM_WORLD_SIZE=0") != std::string::npos);
  }
  SUBCASE("half a pair") {
    env.set("WORLD_SIZE", "4");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("WORLD_SIZE is set but RANK is not") != std::string::npos);
  }
  SUBCASE("local rank not below local world") {
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "4");
    env.set("LOCAL_RANK", "2");
    env.set("LOCAL_WORLD_SIZE", "2");
    CHECK(error_text([] { (void)rank_from_environment(); }).find("LOCAL_RANK=2") != std::string::npos);
  }
}

TEST_CASE("explicit values are checked") {
  CHECK(rank_info::of(2, 3) == rank_info{2, 3, 0, 1, rank_source::explicit_values});
  CHECK_THROWS_AS((void)rank_info::of(3, 3), sluice::usage_error);
  CHECK_THROWS_AS((void)rank_info::of(0, 0), sluice::usage_error);
  CHECK_THROWS_AS((void)rank_info::of(0, 2, 1, 1), sluice::usage_error);
}

TEST_CASE("rank_info feeds the distributed sampler") {
  const auto r = rank_info::of(1, 3);
  sluice::sample::distributed d{sluice::sample::shuffle{10, {.seed = 1}},
                                r.distributed({.tail = sluice::sample::tail::drop, .start = 1})};
  CHECK(d.options().rank == 1);
  CHECK(d.options().world == 3);
  CHECK(d.options().start == 1);
  CHECK(d.size(0) == 3);  // 9 positions left, 3 each
  const sluice::sample::shuffle s{10, {.seed = 1}};
  for (std::uint64_t j = 0; j < 3; ++j) CHECK(d.at(0, j) == s.at(0, 1 + 1 + 3 * j));
}
