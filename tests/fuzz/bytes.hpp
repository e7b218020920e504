// tests/fuzz/bytes.hpp — reads little fields off the front of a fuzzer's input; zeros once it runs out.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fuzz {

struct Bytes {
  const std::uint8_t* data;
  std::size_t size;
  template <class T>
  T take() {
    T value{};
    const std::size_t n = std::min(sizeof(T), size);
    if (n > 0) std::memcpy(&value, data, n);
    data += n;
    size -= n;
    return value;
  }
};

}  // namespace fuzz
