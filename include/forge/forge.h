// The whole public API of forge.
#pragma once

#include "forge/device.h"
#include "forge/devices.h"
#include "forge/dtype.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/safetensors.h"
#include "forge/shape.h"
#include "forge/tensor.h"
#include "forge/threads.h"
#include "forge/version.h"
