# Fails unless README (-DREADME) contains the text of EXAMPLE (-DEXAMPLE) from its first
# #include on, verbatim: the quickstart the README shows is the one ctest compiles.
file(READ ${EXAMPLE} example)
file(READ ${README} readme)
string(FIND "${example}" "#include" start)
string(SUBSTRING "${example}" ${start} -1 body)
string(FIND "${readme}" "${body}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} does not quote ${EXAMPLE} as it is: copy the file's code into "
                      "its C++ block")
endif()
