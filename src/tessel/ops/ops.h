// SPDX-License-Identifier: Apache-2.0
// The differentiable functional API in one include. Every op checks its inputs (errors name the
// op and the values), runs the kernels of its inputs' device, and records a backward node when
// grad mode is on and an input requires grad.
#pragma once

#include "tessel/ops/activation.h"
#include "tessel/ops/attention.h"
#include "tessel/ops/cast.h"
#include "tessel/ops/dropout.h"
#include "tessel/ops/elementwise.h"
#include "tessel/ops/embedding.h"
#include "tessel/ops/grouped_linear.h"
#include "tessel/ops/loss.h"
#include "tessel/ops/matmul.h"
#include "tessel/ops/norm.h"
#include "tessel/ops/paged_attention.h"
#include "tessel/ops/reduce.h"
#include "tessel/ops/rope.h"
#include "tessel/ops/shape.h"
#include "tessel/ops/softmax.h"
