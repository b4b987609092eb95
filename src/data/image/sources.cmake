# The image pipeline (issue 5): sources relative to src/data, and the decoder
# libraries (libjpeg-turbo through its TurboJPEG and libjpeg APIs, libpng).
# Included by src/data/CMakeLists.txt into the dtrain_data target.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(DTRAIN_TURBOJPEG QUIET IMPORTED_TARGET libturbojpeg)
  pkg_check_modules(DTRAIN_PNG QUIET IMPORTED_TARGET libpng)
  pkg_check_modules(DTRAIN_JPEG QUIET IMPORTED_TARGET libjpeg)
endif()
if(TARGET PkgConfig::DTRAIN_TURBOJPEG)
  set(_dtrain_turbojpeg PkgConfig::DTRAIN_TURBOJPEG)
else()
  find_library(_dtrain_turbojpeg NAMES turbojpeg REQUIRED)
endif()
if(TARGET PkgConfig::DTRAIN_JPEG)
  set(_dtrain_jpeg PkgConfig::DTRAIN_JPEG)
else()
  find_library(_dtrain_jpeg NAMES jpeg REQUIRED)
endif()
if(TARGET PkgConfig::DTRAIN_PNG)
  set(_dtrain_png PkgConfig::DTRAIN_PNG)
else()
  find_package(PNG REQUIRED)
  set(_dtrain_png PNG::PNG)
endif()

list(APPEND DTRAIN_IMAGE_SOURCES
  image/io.cpp
  image/decode.cpp
  image/transform.cpp
  image/folder.cpp
  image/packed.cpp
  image/binary_sets.cpp
  image/loader.cpp
  image/fetcher.cpp
  image/synthetic.cpp
  image/tar.cpp
  image/webdataset.cpp
  image/location.cpp
  image/listing_codec.cpp
  image/shared_listing.cpp
  image/cache.cpp
  image/prepare.cpp
  image/registry_image.cpp)
list(APPEND DTRAIN_IMAGE_LIBS ${_dtrain_turbojpeg} ${_dtrain_jpeg} ${_dtrain_png})
