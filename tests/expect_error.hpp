// tests/expect_error.hpp — EXPECT_ERROR(statement, "needle", ...): the statement throws
// ropekit::Error and its message contains every needle (the field and the bad value).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ropekit/error.hpp"

#define EXPECT_ERROR(statement, ...)                                        \
  do {                                                                      \
    try {                                                                   \
      statement;                                                            \
      ADD_FAILURE() << "no ropekit::Error from " #statement;                \
    } catch (const ropekit::Error& e) {                                     \
      for (const char* needle : {__VA_ARGS__}) {                            \
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)    \
            << "message \"" << e.what() << "\" lacks \"" << needle << "\""; \
      }                                                                     \
    }                                                                       \
  } while (0)
