# Cross build for 64-bit Arm Linux with Debian's cross compiler (g++-aarch64-linux-gnu) against Debian's arm64
# packages installed beside the host's (multiarch: libhwy-dev:arm64, libfmt-dev:arm64, ...; scripts/install-deps.sh
# --arm64). The `arm64` preset uses it; tests run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), whose SVE
# vector length the test command sets per run (scripts/test-arm64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries and CMake packages from /usr/lib/aarch64-linux-gnu (CMake finds the multiarch directory from the
# compiler); headers are shared. Programs (the host's pkg-config, qemu) come from the host.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# ctest and gtest_discover_tests run the test binaries through the emulator. The emulated CPU comes from the
# environment, so that one build runs at every SVE vector length: QEMU_CPU=max,sve-max-vq=N (N × 128 bits; qemu's
# default "any" has SVE at up to 2048 bits), or a core without SVE (QEMU_CPU=cortex-a72: NEON only).
# One thread: Debian 12's qemu-user (7.2) on these hosts never returns from creating a thread — a five-line program
# that starts one std::thread spins forever, and so do OpenBLAS's pool at load and every OpenMP team. OMP_THREAD_LIMIT=1
# runs ropekit's parallel regions on the calling thread (their results do not depend on the split: the native
# tests check every split and thread count), OPENBLAS_NUM_THREADS=1 keeps OpenBLAS from starting its pool. Tests
# that start threads of their own are left out of the emulated runs (scripts/test-arm64.sh).
set(CMAKE_CROSSCOMPILING_EMULATOR env OPENBLAS_NUM_THREADS=1 OMP_THREAD_LIMIT=1 qemu-aarch64 -L /usr/aarch64-linux-gnu)
