// SPDX-License-Identifier: Apache-2.0
// The nn layer in one include: Module, initialisers, basic layers and the transformer block.
#pragma once

#include "tessel/nn/init.h"
#include "tessel/nn/layers.h"
#include "tessel/nn/module.h"
#include "tessel/nn/moe.h"
#include "tessel/nn/recompute.h"
