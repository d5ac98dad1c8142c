/** \file kfuse.hpp
 * Umbrella header of the kfuse public API.
 */
#pragma once
#include "kfuse/device.hpp"
#include "kfuse/dtype.hpp"
#include "kfuse/error.hpp"
#include "kfuse/explain.hpp"
#include "kfuse/index_ops.hpp"
#include "kfuse/node.hpp"
#include "kfuse/op.hpp"
#include "kfuse/shape.hpp"
#include "kfuse/options.hpp"
#include "kfuse/stats.hpp"
#include "kfuse/tensor.hpp"
