# Writes the bytes of IN as a C array named NAME (and NAME_len) to OUT:
# the chat page (src/server/page.html) is kept as HTML in the tree and
# built into the binary, so `tandem serve` needs no files beside it.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}.tmp "/* generated from ${IN} by cmake/embed.cmake */\n#include <stddef.h>\n"
     "const char ${NAME}[] = {\n${bytes}0x00};\nconst size_t ${NAME}_len = ${n};\n")
configure_file(${OUT}.tmp ${OUT} COPYONLY) # rewritten only when it changed
