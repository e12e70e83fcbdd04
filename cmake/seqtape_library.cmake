# Every source folder is one library: seqtape_library(<target> [EXCEPT <file>...]
# [MAY_INCLUDE <folder>...]) makes a static library of the folder's *.cpp (but the EXCEPT ones,
# e.g. a program's main.cpp) and checks, at build time, that the folder's *.h, *.cpp and *.inc
# include from no other source folder than their own and the MAY_INCLUDE ones: a wrong
# `#include "train/..."` in infer/ fails the build with the file and the include named, before
# anything compiles, rather than linking by luck through the shared include root.
set(SEQTAPE_LAYERS tensor autograd model io text eval nn train infer serve reference cli python
    CACHE INTERNAL "the source folders whose includes seqtape_library checks")

function(seqtape_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "EXCEPT;MAY_INCLUDE")
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  foreach(f ${arg_EXCEPT})
    list(FILTER sources EXCLUDE REGEX "/${f}$")
  endforeach()
  file(GLOB checked CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp
       ${CMAKE_CURRENT_SOURCE_DIR}/*.inc)
  set(allowed ${folder} ${arg_MAY_INCLUDE})
  set(rules ${CMAKE_CURRENT_BINARY_DIR}/${target}_layers.cmake)
  file(CONFIGURE OUTPUT ${rules} CONTENT
       "set(FOLDER \"${folder}\")\nset(ALLOWED \"${allowed}\")\nset(LAYERS \"${SEQTAPE_LAYERS}\")\nset(FILES \"${checked}\")\n")
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/${target}_layers.stamp)
  set(may "${folder}/")
  foreach(d ${arg_MAY_INCLUDE})
    string(APPEND may " ${d}/")
  endforeach()
  add_custom_command(OUTPUT ${stamp}
                     COMMAND ${CMAKE_COMMAND} -DRULES=${rules} -DSTAMP=${stamp} -DROOT=${PROJECT_SOURCE_DIR}
                             -P ${PROJECT_SOURCE_DIR}/cmake/check_includes.cmake
                     DEPENDS ${checked} ${rules} ${PROJECT_SOURCE_DIR}/cmake/check_includes.cmake
                     COMMENT "Checking that ${folder}/ includes only from ${may}"
                     VERBATIM)
  add_custom_target(${target}_layers DEPENDS ${stamp})
  add_library(${target} STATIC ${sources})
  add_dependencies(${target} ${target}_layers)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()
