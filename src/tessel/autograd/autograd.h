// SPDX-License-Identifier: Apache-2.0
// The autograd layer in one include: grad mode, the tape's nodes and tensor state, backward, and
// activation checkpointing.
#pragma once

#include "tessel/autograd/backend_scope.h"
#include "tessel/autograd/checkpoint.h"
#include "tessel/autograd/engine.h"
#include "tessel/autograd/grad_mode.h"
#include "tessel/autograd/meta.h"
#include "tessel/autograd/node.h"
