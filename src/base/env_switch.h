#pragma once

namespace tf {

// A developer switch from the environment, "0" .. "n_values - 1": -1 when unset or empty. Anything else throws
// tf::Error naming the variable, the value and what it takes (`meaning`), so a typo is not silently ignored.
int env_switch(const char* name, int n_values, const char* meaning);

}  // namespace tf
