# The data parsers (IDX, CIFAR-10, STL-10, JPEG/PNG decode, the packed index).
# They live in dtrain_data, which needs LibTorch (at::Tensor in its headers);
# only the sources with the parsers are compiled here, with the shared torch
# precompiled header, so the fuzz build does not build all of dtrain_data and
# dtrain_comm.
include(${DTRAIN_ROOT}/src/data/image/sources.cmake)  # DTRAIN_IMAGE_LIBS
# Not dtrain_library(... TORCH): reusing the shared precompiled header would
# make this target wait for all of dtrain_comm, whose target owns it.
add_library(fuzz_data_parsers STATIC
  ${DTRAIN_ROOT}/src/data/idx.cpp
  ${DTRAIN_ROOT}/src/data/fingerprint.cpp
  ${DTRAIN_ROOT}/src/data/sampler.cpp  # packed.cpp: `dtrain data pack --shuffle`
  ${DTRAIN_ROOT}/src/data/image/io.cpp
  ${DTRAIN_ROOT}/src/data/image/decode.cpp
  ${DTRAIN_ROOT}/src/data/image/transform.cpp
  ${DTRAIN_ROOT}/src/data/image/folder.cpp
  ${DTRAIN_ROOT}/src/data/image/packed.cpp
  ${DTRAIN_ROOT}/src/data/image/location.cpp
  ${DTRAIN_ROOT}/src/data/image/listing_codec.cpp
  ${DTRAIN_ROOT}/src/data/image/cache.cpp
  ${DTRAIN_ROOT}/src/data/image/tar.cpp
  ${DTRAIN_ROOT}/src/data/image/webdataset.cpp
  ${DTRAIN_ROOT}/src/data/image/binary_sets.cpp)
target_include_directories(fuzz_data_parsers PUBLIC ${DTRAIN_ROOT}/include ${CMAKE_BINARY_DIR}/generated
                                             PRIVATE ${DTRAIN_ROOT}/src)
target_compile_options(fuzz_data_parsers PRIVATE ${DTRAIN_WARNINGS})
# dtrain_objstore: the sources read s3:// locations too (Note [Data locations]).
target_link_libraries(fuzz_data_parsers PUBLIC dtrain_objstore dtrain_common torch ZLIB::ZLIB
                                               ${DTRAIN_IMAGE_LIBS})
if(DTRAIN_USE_PCH)
  target_precompile_headers(fuzz_data_parsers PRIVATE <ATen/ATen.h>)
endif()
# IDX (raw and gzip), CIFAR-10 and STL-10 binaries.
dtrain_fuzzer(data_records SOURCES data_records.cpp DEPS fuzz_data_parsers ZLIB::ZLIB)
# JPEG and PNG: probe, full decode, and RandomResizedCrop's region decode.
dtrain_fuzzer(image_decode SOURCES image_decode.cpp DEPS fuzz_data_parsers)
# The packed dataset's index.bin (`dtrain data pack`).
dtrain_fuzzer(packed_index SOURCES packed_index.cpp DEPS fuzz_data_parsers)
# WebDataset tar shards: the tar reader and the grouping of members into samples.
dtrain_fuzzer(webdataset_tar SOURCES webdataset_tar.cpp DEPS fuzz_data_parsers)
