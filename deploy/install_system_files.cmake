# Runs at install time (cmake --install, cpack), when CMAKE_INSTALL_PREFIX is the final prefix:
# installs the systemd units with ExecStart= and --config= naming the installed binaries and
# config directory, and the default configs into <sysconfdir>/fabricscope, where sysconfdir is
# /etc for the prefix /usr (GNUInstallDirs' rule) and <prefix>/etc otherwise. Existing configs
# are kept: cmake --install over a configured host does not overwrite local edits.
# Input: FABRICSCOPE_DEPLOY_DIR (the source deploy/ folder).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(sysconf_dir "/etc/fabricscope")
else()
  set(sysconf_dir "${CMAKE_INSTALL_PREFIX}/etc/fabricscope")
endif()
set(unit_dir "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")

foreach(unit fabricscope-agent.service fabricscope-aggregator.service)
  file(READ "${FABRICSCOPE_DEPLOY_DIR}/systemd/${unit}" text)
  string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_PREFIX}/bin/" text "${text}")
  string(REPLACE "/etc/fabricscope/" "${sysconf_dir}/" text "${text}")
  set(dest "$ENV{DESTDIR}${unit_dir}/${unit}")
  message(STATUS "Installing: ${dest}")
  file(WRITE "${dest}" "${text}")
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${unit_dir}/${unit}")
endforeach()

foreach(config agent.yaml aggregator.yaml)
  set(dest "$ENV{DESTDIR}${sysconf_dir}/${config}")
  if(EXISTS "${dest}")
    message(STATUS "Keeping: ${dest}")
  else()
    message(STATUS "Installing: ${dest}")
    file(COPY "${FABRICSCOPE_DEPLOY_DIR}/config/${config}" DESTINATION "$ENV{DESTDIR}${sysconf_dir}"
      FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${sysconf_dir}/${config}")
endforeach()
