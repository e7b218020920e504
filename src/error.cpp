// Anchors ropekit::Error's vtable in the library.
#include "ropekit/error.hpp"
