#include "agent/local_sink.h"

#include "glog/logging.h"

namespace fabricscope::agent {

LocalSink::LocalSink(exporters::Admission& admission, v1::Hello hello)
    : admission_(admission), hello_(std::move(hello)) {
  hello_.set_resume_seq(1);
  if (auto ack = admission_.OnHello(hello_); !ack.ok()) {
    LOG(ERROR) << "in-process aggregator refused the agent: " << ack.status();
  }
}

void LocalSink::Submit(v1::Batch batch) {
  batch.set_seq(next_seq_++);
  auto ack = admission_.OnBatch(hello_.node(), hello_.instance_id(), batch);
  if (!ack.ok()) {
    rejected_.fetch_add(1);
    LOG_EVERY_N(ERROR, 100) << "in-process aggregator rejected a batch: " << ack.status();
    return;
  }
  acked_.store(*ack);
}

}  // namespace fabricscope::agent
