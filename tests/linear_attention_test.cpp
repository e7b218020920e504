#include <gtest/gtest.h>
TEST(LinearAttention, Placeholder) {}
