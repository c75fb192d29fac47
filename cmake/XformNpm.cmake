# xform_npm_ci(SRC DIR WHAT): npm ci of SRC's package.json and lockfile into
# DIR in the build tree, its output ${DIR}/npm-ci.stamp (what the steps
# that use DIR/node_modules depend on). Packages come pinned by the
# lockfile, never fetched at run time.
function(xform_npm_ci src dir what)
  find_program(NPM npm REQUIRED)
  add_custom_command(
    OUTPUT ${dir}/npm-ci.stamp
    COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
    COMMAND ${CMAKE_COMMAND} -E copy ${src}/package.json
      ${src}/package-lock.json ${dir}
    COMMAND ${NPM} ci --no-audit --no-fund --loglevel=error --prefix ${dir}
    COMMAND ${CMAKE_COMMAND} -E touch ${dir}/npm-ci.stamp
    DEPENDS ${src}/package.json ${src}/package-lock.json
    COMMENT "npm ci: ${what} (pinned)")
endfunction()
