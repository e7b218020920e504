// A progress bar with an ETA on stderr for the lab's sub-commands (eval, passkey): a bar when stderr is a terminal, a
// plain line per step otherwise.
#pragma once

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

namespace ropekit::cli {

class Progress {
 public:
  Progress(std::ostream& err, std::string name)
      : err_(err), name_(std::move(name)), tty_(&err == &std::cerr && isatty(2)) {}
  void operator()(std::int64_t done, std::int64_t total, const std::string& what) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double fraction = total > 0 ? double(done) / double(total) : 1.0;
    const double eta = fraction > 0 ? elapsed / fraction - elapsed : 0.0;
    if (tty_) {
      const int width = 30, filled = int(fraction * width);
      fmt::print(err_, "\r[{}{}] {:5.1f}%  {:<24} ETA {:5.1f} s", std::string(std::size_t(filled), '#'),
                 std::string(std::size_t(width - filled), '.'), 100 * fraction, what, eta);
      if (done == total) err_ << "\n";
    } else {
      fmt::print(err_, "{}: {}/{} tokens ({:.1f}%), {}, {:.1f} s elapsed, ETA {:.1f} s\n", name_, done, total,
                 100 * fraction, what, elapsed, eta);
    }
    err_.flush();
  }

 private:
  std::ostream& err_;
  std::string name_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace ropekit::cli
