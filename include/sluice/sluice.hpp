// sluice/sluice.hpp — the common set: composition, samplers, readers, per-sample and per-batch
// stages, prefetch. Optional parts with extra dependencies (JPEG via libjpeg-turbo, gzip IDX via
// zlib, CUDA) are included explicitly from their own headers.
#pragma once

#include "sluice/core/batch.hpp"
#include "sluice/core/concepts.hpp"
#include "sluice/core/config.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/loader.hpp"
#include "sluice/core/pipeline.hpp"
#include "sluice/core/random.hpp"
#include "sluice/core/stats.hpp"
#include "sluice/io/crc32c.hpp"
#include "sluice/io/fixed_records.hpp"
#include "sluice/io/mapped_file.hpp"
#include "sluice/io/shard.hpp"
#include "sluice/policy/depth_fixed.hpp"
#include "sluice/sample/distributed.hpp"
#include "sluice/sample/sequential.hpp"
#include "sluice/sample/shuffle.hpp"
#include "sluice/stage/collate.hpp"
#include "sluice/stage/map.hpp"
#include "sluice/stage/prefetch.hpp"
#include "sluice/stage/read.hpp"
