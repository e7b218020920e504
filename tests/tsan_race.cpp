// tests/tsan_race.cpp — the Python tier's control under ThreadSanitizer: a shared library, instrumented like the
// extension module, whose one function races two threads on a plain counter. Loaded into the same interpreter with
// the same preloaded runtime (tsan.python_control_race_is_reported), it must be reported, or a green
// tsan.python_threads proves nothing.
#include <thread>

namespace {
int counter = 0;  // unsynchronised on purpose
}

extern "C" __attribute__((visibility("default"))) int ropekit_tsan_race() {
  std::thread a([] {
    for (int i = 0; i < 1000; ++i) ++counter;
  });
  std::thread b([] {
    for (int i = 0; i < 1000; ++i) ++counter;
  });
  a.join();
  b.join();
  return counter;
}
