# Finds oneDNN's CPU library and headers directly, without oneDNN's own dnnl-config.cmake:
# Debian's is built with the OpenCL GPU runtime and stops the configure with an error unless
# the OpenCL headers are installed too, although mxtrain only uses the CPU engine.
#
# Defines dnnl_FOUND, dnnl_VERSION and the imported target DNNL::dnnl (the name oneDNN's
# config gives it). Used by mxtrain's build and, installed next to mxtrainConfig.cmake, by
# its users' links (a static libmxtrain built with the oneDNN benchmark baseline needs
# libdnnl).
find_path(dnnl_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(dnnl_LIBRARY dnnl)
mark_as_advanced(dnnl_INCLUDE_DIR dnnl_LIBRARY)

if(dnnl_INCLUDE_DIR AND EXISTS "${dnnl_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h")
  file(STRINGS "${dnnl_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_version_lines
       REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define DNNL_VERSION_${_part} ([0-9]+).*" "\\1" _dnnl_${_part}
           "${_dnnl_version_lines}")
  endforeach()
  set(dnnl_VERSION "${_dnnl_MAJOR}.${_dnnl_MINOR}.${_dnnl_PATCH}")
  unset(_dnnl_version_lines)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(dnnl
  REQUIRED_VARS dnnl_LIBRARY dnnl_INCLUDE_DIR
  VERSION_VAR dnnl_VERSION)

if(dnnl_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${dnnl_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${dnnl_INCLUDE_DIR}")
endif()
