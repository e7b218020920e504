// `ropekit`: see cli.hpp and `ropekit --help`.
#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ropekit::cli::run_cli(args, std::cout, std::cerr);
}
