#pragma once

// Planted controls (specs/kernel-contract.md): deliberately broken variants that exist only in the test-only
// build of a backend library (TF_CTL=1); the contract test picks one at a time and must see its check fail.
#if defined(TF_CTL) && TF_CTL
namespace tf {
extern int g_active_control;
}
#define TF_CTL_ON(n) (::tf::g_active_control == (n))
#else
#define TF_CTL_ON(n) false
#endif
