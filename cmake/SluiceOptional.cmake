# Optional components. Each becomes an INTERFACE target only when its dependency is found, and
# the headers that need it say so at the top. The core (sluice::sluice) needs only Threads. How each
# dependency is found: cmake/SluiceDependencies.cmake (an installed sluice uses the same file).
include(SluiceDependencies)

# zlib: gzip-compressed IDX files (sluice/io/idx.hpp).
sluice_find_dependency(zlib _sluice_found)
if(_sluice_found)
  add_library(sluice_zlib INTERFACE)
  add_library(sluice::zlib ALIAS sluice_zlib)
  target_link_libraries(sluice_zlib INTERFACE sluice ZLIB::ZLIB)
  target_compile_definitions(sluice_zlib INTERFACE SLUICE_WITH_ZLIB=1)
endif()

# libjpeg-turbo: sluice/codec/jpeg.hpp reads headers and encodes through its TurboJPEG API and
# decodes through its libjpeg API (region decode: jpeg_crop_scanline, jpeg_skip_scanlines), so it
# needs both (Debian: libturbojpeg0-dev and libjpeg62-turbo-dev).
sluice_find_dependency(jpeg _sluice_found)
if(SLUICE_TURBOJPEG_FOUND AND NOT SLUICE_LIBJPEG_FOUND)
  message(STATUS "sluice: TurboJPEG found but not libjpeg-turbo's libjpeg API (Debian: libjpeg62-turbo-dev); no sluice::jpeg")
endif()
if(_sluice_found)
  add_library(sluice_jpeg INTERFACE)
  add_library(sluice::jpeg ALIAS sluice_jpeg)
  target_link_libraries(sluice_jpeg INTERFACE sluice PkgConfig::SLUICE_TURBOJPEG PkgConfig::SLUICE_LIBJPEG)
  target_compile_definitions(sluice_jpeg INTERFACE SLUICE_WITH_TURBOJPEG=1)
endif()

# libpng: sluice/codec/png.hpp (and, with sluice::jpeg, codec/image.hpp).
sluice_find_dependency(png _sluice_found)
if(_sluice_found)
  add_library(sluice_png INTERFACE)
  add_library(sluice::png ALIAS sluice_png)
  target_link_libraries(sluice_png INTERFACE sluice PkgConfig::SLUICE_LIBPNG)
  target_compile_definitions(sluice_png INTERFACE SLUICE_WITH_PNG=1)
endif()

# FFmpeg (Debian: libavformat-dev, libavcodec-dev, libswscale-dev): sluice/codec/video.hpp and
# sluice/io/video_clips.hpp, clips of videos decoded into the batch.
sluice_find_dependency(video _sluice_found)
if(_sluice_found)
  add_library(sluice_video INTERFACE)
  add_library(sluice::video ALIAS sluice_video)
  target_link_libraries(sluice_video INTERFACE sluice PkgConfig::SLUICE_FFMPEG)
  target_compile_definitions(sluice_video INTERFACE SLUICE_WITH_VIDEO=1)
endif()

# DLPack's header (Debian: libdlpack-dev): sluice/core/dlpack.hpp. Header-only, nothing to link;
# the target puts its directory on the include path (a no-op for /usr/include).
sluice_find_dependency(dlpack _sluice_found)
if(_sluice_found)
  add_library(sluice_dlpack INTERFACE)
  add_library(sluice::dlpack ALIAS sluice_dlpack)
  target_link_libraries(sluice_dlpack INTERFACE sluice)
  # Build tree only: an installed sluice looks for the header again (sluiceConfig.cmake).
  target_include_directories(sluice_dlpack SYSTEM INTERFACE $<BUILD_INTERFACE:${SLUICE_DLPACK_INCLUDE_DIR}>)
endif()

# libcurl (Debian: libcurl4-openssl-dev): sluice/io/remote.hpp, shards fetched by http:// URL into a
# node-local disk tier.
sluice_find_dependency(curl _sluice_found)
if(_sluice_found)
  add_library(sluice_curl INTERFACE)
  add_library(sluice::curl ALIAS sluice_curl)
  target_link_libraries(sluice_curl INTERFACE sluice CURL::libcurl)
  target_compile_definitions(sluice_curl INTERFACE SLUICE_WITH_CURL=1)
endif()

# Thrust's headers with its CPP (host) backend: sluice/cuda/resident.hpp built by a host compiler,
# "device" memory being host memory. Needs only the CCCL headers (the CUDA toolkit ships them in
# include/cccl), not nvcc or a GPU, so it exists in builds with SLUICE_ENABLE_CUDA=OFF too.
find_path(SLUICE_CCCL_INCLUDE_DIR thrust/version.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDA_HOME ENV CUDA_PATH
  PATHS /usr/local/cuda /opt/cuda
  PATH_SUFFIXES include/cccl cccl include
  DOC "Directory holding thrust/version.h (CCCL: Thrust, CUB, libcu++)")
if(SLUICE_CCCL_INCLUDE_DIR)
  add_library(sluice_thrust_host INTERFACE)
  add_library(sluice::thrust_host ALIAS sluice_thrust_host)
  target_link_libraries(sluice_thrust_host INTERFACE sluice)
  target_include_directories(sluice_thrust_host SYSTEM INTERFACE $<BUILD_INTERFACE:${SLUICE_CCCL_INCLUDE_DIR}>)
  target_compile_definitions(sluice_thrust_host INTERFACE THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP)
endif()

# CUDA: see cmake/SluiceCuda.cmake (added by the GPU path).
if(SLUICE_ENABLE_CUDA AND EXISTS ${CMAKE_CURRENT_LIST_DIR}/SluiceCuda.cmake)
  include(SluiceCuda)
endif()
