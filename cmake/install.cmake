# Installation and packaging (docs/install.md):
#   cmake --install build [--prefix P]   headers, the component libraries, the
#                                        dtrain CLI, the examples' sources and
#                                        a CMake package: find_package(dtrain)
#                                        gives dtrain::dtrain
#   cpack -G DEB --config build/CPackConfig.cmake   the same as a .deb
# Included by the top CMakeLists.txt after every component's target exists.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DTRAIN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/dtrain"
    CACHE STRING "Where the CMake package (dtrainConfig.cmake) is installed, relative to the prefix")

# pkg_check_modules prefixes of the imported targets the components link, and
# the pkg-config module each stands for: dtrainConfig.cmake creates the same
# PkgConfig::<prefix> targets in the user's project.
set(_dtrain_pkgconfig_modules ZMQ=libzmq DTRAIN_TURBOJPEG=libturbojpeg DTRAIN_PNG=libpng
                              DTRAIN_JPEG=libjpeg)

# Note [Installed include directories]
# dtrain_library() gives each component the source tree's include/ and the
# generated config.h's folder as public include directories (src/ is private:
# Note [Private src] in dtrain.cmake). An exported target may not name source or build paths, so here
# each is kept for the build tree only ($<BUILD_INTERFACE:...>) and the
# installed include/ is added. Done here rather than in dtrain_library() so the
# component CMakeLists stay as they are; src/ is never installed.
function(_dtrain_export_include_dirs target)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(wrapped)
  foreach(dir IN LISTS dirs)
    if(dir MATCHES "^\\$<")
      list(APPEND wrapped "${dir}")
    else()
      list(APPEND wrapped "$<BUILD_INTERFACE:${dir}>")
    endif()
  endforeach()
  list(APPEND wrapped "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${wrapped}")
endfunction()

# The find_dependency() and pkg_check_modules() lines dtrainConfig.cmake needs
# for the imported targets in the components' link interfaces.
function(_dtrain_config_dependencies components out)
  set(pkg_prefixes)
  set(need_png OFF)
  set(find_packages)  # CMake's own Find modules (http: CURL; objstore: OpenSSL, EXPAT)
  foreach(component IN LISTS components)
    get_target_property(libs dtrain_${component} INTERFACE_LINK_LIBRARIES)
    foreach(lib IN LISTS libs)
      if(lib MATCHES "PkgConfig::([A-Za-z0-9_]+)")
        list(APPEND pkg_prefixes ${CMAKE_MATCH_1})
      elseif(lib MATCHES "PNG::PNG")
        set(need_png ON)
      elseif(lib MATCHES "(CURL|OpenSSL|EXPAT)::")
        list(APPEND find_packages ${CMAKE_MATCH_1})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES pkg_prefixes)
  set(text "")
  if(need_png)
    string(APPEND text "find_dependency(PNG)\n")
  endif()
  list(REMOVE_DUPLICATES find_packages)
  foreach(package IN LISTS find_packages)
    string(APPEND text "find_dependency(${package})\n")
  endforeach()
  if(pkg_prefixes)
    string(APPEND text "find_dependency(PkgConfig)\n")
  endif()
  foreach(prefix IN LISTS pkg_prefixes)
    set(module "")
    foreach(pair IN LISTS _dtrain_pkgconfig_modules)
      if(pair MATCHES "^${prefix}=(.+)$")
        set(module ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(NOT module)
      message(FATAL_ERROR "cmake/install.cmake: PkgConfig::${prefix} is linked by a dtrain component "
                          "but has no pkg-config module in _dtrain_pkgconfig_modules: add it there")
    endif()
    string(APPEND text "if(NOT TARGET PkgConfig::${prefix})\n"
                       "  pkg_check_modules(${prefix} REQUIRED QUIET IMPORTED_TARGET ${module})\n"
                       "endif()\n")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# dtrain_install(COMPONENTS ...): install rules for the component libraries,
# the umbrella target dtrain_all (exported as dtrain::dtrain), the CLI, the
# public headers, the examples and the CMake package.
function(dtrain_install)
  cmake_parse_arguments(A "" "" "COMPONENTS" ${ARGN})
  set(targets)
  foreach(component IN LISTS A_COMPONENTS)
    _dtrain_export_include_dirs(dtrain_${component})
    set_target_properties(dtrain_${component} PROPERTIES EXPORT_NAME ${component})
    list(APPEND targets dtrain_${component})
  endforeach()
  set_target_properties(dtrain_all PROPERTIES EXPORT_NAME dtrain)
  install(TARGETS ${targets} dtrain_all EXPORT dtrainTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})

  # The CLI finds a LibTorch outside the system's folders (e.g. a wheel's) as
  # it did in the build tree.
  set_target_properties(dtrain PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS dtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

  install(DIRECTORY ${DTRAIN_ROOT}/include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
  install(FILES ${CMAKE_BINARY_DIR}/generated/dtrain/config.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain)
  # examples/ builds on its own against the installed package (its
  # CMakeLists.txt calls find_package(dtrain) when it is the top project).
  install(DIRECTORY ${DTRAIN_ROOT}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
  install(FILES ${DTRAIN_ROOT}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

  _dtrain_config_dependencies("${A_COMPONENTS}" DTRAIN_CONFIG_DEPENDENCIES)
  # How the installed package finds LibTorch: as the build did.
  if(DTRAIN_TORCH_CPU_ONLY)
    # The wheel's CPU library (Note [The wheel's CPU library]): the same
    # imported target `torch`, from the same folder, without a CUDA toolkit.
    install(FILES ${DTRAIN_ROOT}/cmake/torch_cpu.cmake DESTINATION ${DTRAIN_INSTALL_CMAKEDIR}
            RENAME dtrainTorchCpu.cmake)
    set(DTRAIN_TORCH_DEPENDENCY "set(DTRAIN_TORCH_CPU_PREFIX \"${TORCH_INSTALL_PREFIX}\")\n"
                                "include(\"\${CMAKE_CURRENT_LIST_DIR}/dtrainTorchCpu.cmake\")")
    string(REPLACE ";" "" DTRAIN_TORCH_DEPENDENCY "${DTRAIN_TORCH_DEPENDENCY}")
  elseif(TORCH_INSTALL_PREFIX MATCHES "^/usr(/|$)")
    set(DTRAIN_TORCH_DEPENDENCY "find_dependency(Torch HINTS \"${Torch_DIR}\")")
  else()
    # A LibTorch outside the system's folders (the torch wheel): its
    # TorchConfig finds its libraries and Caffe2's package with find_library
    # and find_package, which search the system's folders before their PATHS,
    # so with Debian's LibTorch also installed they would mix in 1.13's. Its
    # prefix goes first for that one call, as scripts/torch-wheel.sh does for
    # dtrain's build; a CUDA build also names the toolkit it was built with.
    set(_dtrain_cuda_root "")
    if(DTRAIN_HAVE_CUDA AND CUDAToolkit_LIBRARY_ROOT)
      set(_dtrain_cuda_root "if(NOT DEFINED CUDAToolkit_ROOT)\n"
                            "  set(CUDAToolkit_ROOT \"${CUDAToolkit_LIBRARY_ROOT}\")\n"
                            "endif()\n")
    endif()
    set(DTRAIN_TORCH_DEPENDENCY
        ${_dtrain_cuda_root}
        "set(_dtrain_prefix_path \"\${CMAKE_PREFIX_PATH}\")\n"
        "list(PREPEND CMAKE_PREFIX_PATH \"${TORCH_INSTALL_PREFIX}\" \"${TORCH_INSTALL_PREFIX}/share/cmake\")\n"
        "find_dependency(Torch HINTS \"${Torch_DIR}\")\n"
        "set(CMAKE_PREFIX_PATH \"\${_dtrain_prefix_path}\")")
    string(REPLACE ";" "" DTRAIN_TORCH_DEPENDENCY "${DTRAIN_TORCH_DEPENDENCY}")
  endif()
  # A program linking the installed dtrain finds a LibTorch outside the
  # system's folders as dtrain's own programs do (Note [RPATH to the wheel]).
  set(DTRAIN_RPATH_CONFIG "")
  if(DTRAIN_TORCH_RPATH)
    string(REPLACE ";" ":" _dtrain_rpath "${DTRAIN_TORCH_RPATH}")
    set(DTRAIN_RPATH_CONFIG
        "set_property(TARGET dtrain::dtrain APPEND PROPERTY INTERFACE_LINK_OPTIONS\n"
        "             \"LINKER:--disable-new-dtags\" \"LINKER:-rpath,${_dtrain_rpath}\")")
    string(REPLACE ";" "" DTRAIN_RPATH_CONFIG "${DTRAIN_RPATH_CONFIG}")
  endif()
  configure_package_config_file(${DTRAIN_ROOT}/cmake/dtrainConfig.cmake.in
    ${CMAKE_BINARY_DIR}/generated/dtrainConfig.cmake
    INSTALL_DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})
  # 0.x: a minor release may change the API.
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/dtrainConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/generated/dtrainConfig.cmake
                ${CMAKE_BINARY_DIR}/generated/dtrainConfigVersion.cmake
          DESTINATION ${DTRAIN_INSTALL_CMAKEDIR})
endfunction()

# ---- Debian package (cpack -G DEB) -------------------------------------------
# One package, "dtrain": static libraries, headers and the CMake package (so
# it depends on the -dev packages their link interface names) and the CLI.
# Installed under /usr; the libraries in /usr/lib, the package in
# /usr/lib/cmake/dtrain, where find_package looks.
set(CPACK_PACKAGE_NAME dtrain)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Distributed data-parallel training in C++ on LibTorch (library, headers, CLI)")
set(CPACK_PACKAGE_DESCRIPTION
    "DDP-style reducer, Horovod-style optimizer, parameter server, torchrun-compatible \
launcher (dtrain run), image pipeline and trainer. find_package(dtrain) and \
target_link_libraries(app dtrain::dtrain) link a program against it.")
set(CPACK_PACKAGE_CONTACT "dtrain developers")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# What the installed CMake package finds (find_dependency in dtrainConfig.cmake),
# as Debian 12 names it; libtorch-dev only when this build used Debian's
# LibTorch (a wheel's LibTorch is not a Debian package).
set(_dtrain_deb_depends
    "nlohmann-json3-dev (>= 3), prometheus-cpp-dev, zlib1g-dev, libturbojpeg0-dev, "
    "libjpeg62-turbo-dev, libpng-dev, libzmq3-dev, pkgconf | pkg-config, "
    "libcurl4-openssl-dev | libcurl-dev, libssl-dev, libexpat1-dev")
string(REPLACE ";" "" _dtrain_deb_depends "${_dtrain_deb_depends}")
get_filename_component(_dtrain_torch_real "${TORCH_INSTALL_PREFIX}" REALPATH)
if(_dtrain_torch_real MATCHES "^/usr(/|$)" AND NOT _dtrain_torch_real MATCHES "^/usr/local(/|$)")
  set(DTRAIN_DEB_NEEDS_LIBTORCH ON)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _dtrain_torch_mm "${Torch_VERSION}")
  set(_dtrain_deb_depends "libtorch-dev (>= ${_dtrain_torch_mm}), ${_dtrain_deb_depends}")
else()
  set(DTRAIN_DEB_NEEDS_LIBTORCH OFF)
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_dtrain_deb_depends}")
include(CPack)
