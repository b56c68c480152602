# Writes OUT (a header defining TND_GIT_COMMIT) from the git checkout at SRC:
# the short commit, with "+" when tracked files have uncommitted changes;
# "unknown" outside a checkout. Rewritten only when it changes, so an
# unchanged tree rebuilds nothing. Run at every build (CMakeLists.txt), so
# the commit bench prints is the one built, not the one configured.
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit unknown)
elseif(dirty)
  set(commit "${commit}+")
endif()
set(text "#define TND_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
