#pragma once
#include <spdlog/spdlog.h>

namespace tf::log {

using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::warn;

}  // namespace tf::log
