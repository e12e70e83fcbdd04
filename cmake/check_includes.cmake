# Run by seqtape_library's build step (cmake -P): fails when a file of FOLDER includes a header
# of a source folder outside ALLOWED, naming the file, the include and what the folder may use.
cmake_minimum_required(VERSION 3.20)  # IN_LIST and the other policies of the project
include(${RULES})
set(errors "")
foreach(f IN LISTS FILES)
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][a-z_]+/")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "[\"<]([a-z_]+)/[^\">]*[\">]" inc "${line}")
    set(dir ${CMAKE_MATCH_1})
    if(dir IN_LIST LAYERS AND NOT dir IN_LIST ALLOWED)
      file(RELATIVE_PATH rel ${ROOT} ${f})
      string(APPEND errors "  ${rel} includes ${inc}\n")
    endif()
  endforeach()
endforeach()
if(errors)
  list(JOIN ALLOWED "/ " may)
  message(FATAL_ERROR "layering: ${FOLDER}/ may include only from ${may}/ "
                      "(the libraries it links), but\n${errors}")
endif()
file(TOUCH ${STAMP})
