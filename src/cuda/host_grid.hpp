// src/cuda/host_grid.hpp — what the backend's own sources and the tests include: the kernel bodies and the backend's
// interface (rope/device_backend.hpp: the shapes made from prepared calls, the host's runs of the bodies over their
// whole launch grids, the runtime). The layers above include only the interface.
//
// The ordinary test suite runs the bodies on every machine (no GPU or CUDA toolkit needed): the same per-thread body
// a GPU runs, every (block, thread) of the launch, against the scalar reference bit for bit (tests/cuda_host_test.cpp).
// Internal.
#pragma once

#include "cuda/append_body.hpp"
#include "cuda/kshift_body.hpp"
#include "cuda/rotate_body.hpp"
#include "rope/device_backend.hpp"  // the shape makers and host runs declared for the layers above
