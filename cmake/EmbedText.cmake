# cmake -P script: writes OUT, a C++ file defining FN (a function declared in HEADER that
# returns std::string_view) as the text of file IN, a raw string literal.
file(READ "${IN}" text)
file(RELATIVE_PATH rel "${ROOT}" "${IN}")
set(body "// Generated from ${rel} by cmake/EmbedText.cmake. Do not edit.\n")
string(APPEND body "#include \"${HEADER}\"\n\n")
string(APPEND body "std::string_view ${FN}() {\n  return R\"megafold_text(${text})megafold_text\";\n}\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
