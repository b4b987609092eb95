// The reducer's bucket timings into a timeline.
#include "dtrain/ddp.h"
#include "dtrain/timeline.h"

namespace dtrain {

std::function<void(const BucketTiming&)> timeline_bucket_observer(Timeline* timeline) {
  if (timeline == nullptr) return {};
  return [timeline](const BucketTiming& b) {
    timeline->bucket(b.index, b.bytes, b.launched, b.completed);
  };
}

}  // namespace dtrain
