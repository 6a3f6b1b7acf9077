# Man pages from the CLI's own help: tracecorr.1 and tracecorr-<subcommand>.1
# for every subcommand `tracecorr --help` lists, each made by help2man and
# gzipped. Run by cmake/Package.cmake:
#   cmake -DTRACECORR=<binary> -DHELP2MAN=<help2man> -DOUT=<dir> -DVERSION=<x.y.z> -P GenerateManPages.cmake
#
# The CLI runs as `tracecorr` from PATH, so its usage lines name the command,
# never the build tree it was run from.
foreach(var TRACECORR HELP2MAN OUT VERSION)
  if(NOT ${var})
    message(FATAL_ERROR "GenerateManPages: ${var} is not set")
  endif()
endforeach()
get_filename_component(bin_dir ${TRACECORR} DIRECTORY)
set(ENV{PATH} "${bin_dir}:$ENV{PATH}")
set(ENV{COLUMNS} 100)
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

execute_process(COMMAND tracecorr --help OUTPUT_VARIABLE help RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "GenerateManPages: tracecorr --help exited ${status}")
endif()
# CLI11's "Subcommands:" section: one "  <name>  <description>" line each.
string(REGEX MATCH "\nSubcommands:\n(.*)" _ "${help}")
string(REPLACE "\n" ";" lines "${CMAKE_MATCH_1}")
set(subcommands "")
set(descriptions "")
foreach(line IN LISTS lines)
  if(line MATCHES "^  ([a-z][a-z0-9-]*)  +(.*)$")
    list(APPEND subcommands ${CMAKE_MATCH_1})
    string(REPLACE ";" "," description "${CMAKE_MATCH_2}")
    list(APPEND descriptions "${description}")
  endif()
endforeach()
if(NOT subcommands)
  message(FATAL_ERROR "GenerateManPages: no subcommand found in tracecorr --help:\n${help}")
endif()

function(help2man command description page)
  set(see_also ${OUT}/see-also.h2m)
  execute_process(
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${VERSION} --section=1
            --name=${description} --include=${see_also} --output=${OUT}/${page}.1 ${command}
    RESULT_VARIABLE status ERROR_VARIABLE error)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "GenerateManPages: help2man ${command}: ${error}")
  endif()
  # A subcommand's page is tracecorr-<sub>(1), as man and apropos look it up
  # (help2man titles it after the first word of the command).
  if(NOT page STREQUAL "tracecorr")
    file(READ ${OUT}/${page}.1 roff)
    string(TOUPPER ${page} title)
    string(REPLACE ".TH TRACECORR \"1\"" ".TH ${title} \"1\"" roff "${roff}")
    string(REPLACE "\"${command} ${VERSION}\"" "\"tracecorr ${VERSION}\"" roff "${roff}")
    string(REPLACE "\n${command} \\-" "\n${page} \\-" roff "${roff}")
    file(WRITE ${OUT}/${page}.1 "${roff}")
  endif()
  execute_process(COMMAND gzip -9 -n -f ${OUT}/${page}.1 RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "GenerateManPages: gzip ${page}.1 failed")
  endif()
endfunction()

set(see_also_text "[SEE ALSO]\n")
foreach(sub IN LISTS subcommands)
  string(APPEND see_also_text ".BR tracecorr-${sub} (1)\n")
endforeach()
string(APPEND see_also_text "\nEach protocol's reference and mutants, to judge and to compare with: /usr/lib/tracecorr/fixtures/.\n")
file(WRITE ${OUT}/see-also.h2m "${see_also_text}")

help2man(tracecorr "conformance kit and host-agent simulator for profiler-to-tracer trace correlation"
         tracecorr)
foreach(sub description IN ZIP_LISTS subcommands descriptions)
  help2man("tracecorr ${sub}" "${description}" tracecorr-${sub})
endforeach()
file(REMOVE ${OUT}/see-also.h2m)
