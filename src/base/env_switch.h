#pragma once

namespace tf {

// A switch from the environment, "0" .. "n_values - 1" or -1 when unset or empty; else tf::Error naming it.
int env_switch(const char* name, int n_values, const char* meaning);

}  // namespace tf
