/** \file error.hpp
 * The error model. Every error says who is at fault:
 *  - UserError: the program recorded an invalid op. Thrown when the op is recorded, naming the
 *    op, the operand shapes and dtypes, and what would fix it.
 *  - InternalError: a kfuse bug; the message carries the IR involved.
 *  - BackendError: a code generator or compiler failed; carries the compiler's log. The executor
 *    catches it, logs the reason and falls back to the next backend.
 *  - BackendUnavailable: a device or driver that is not present was asked for.
 * The library never aborts the process.
 */
#pragma once
#include <stdexcept>
#include <string>

namespace kfuse {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class UserError : public Error {
 public:
  using Error::Error;
};
class InternalError : public Error {
 public:
  using Error::Error;
};
class BackendError : public Error {
 public:
  BackendError(const std::string& what, std::string log = {}) : Error(what), log_(std::move(log)) {}
  /// The compiler's diagnostic output, if any.
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

}  // namespace kfuse
