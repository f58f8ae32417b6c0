#pragma once
#include <string>
#include <vector>

namespace tf {

// Finds stop strings in streamed text and holds back any tail that could still become one.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds text; returns what may be emitted now. Sets stopped() when a stop string completes.
  std::string push(const std::string& text);
  // The held-back tail, emitted when the reply ends without a stop.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tf
