# Cross build for 64-bit Arm Linux with Debian's g++-aarch64-linux-gnu and the arm64 development
# packages (multiarch); the binaries run under qemu-user (scripts/cross-aarch64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} /)
# ctest runs the test binaries through qemu. `-L /`: the multiarch arm64 loader and libc
# (libc6:arm64); the cross toolchain's own loader in /usr/aarch64-linux-gnu with the multiarch
# libc hangs in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
