// A non-owning reference to a callable: passing a lambda never allocates (std::function may).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace llada {

template <typename Sig>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
  public:
    // The callable must outlive the FunctionRef (use it for parameters only).
    template <typename F,
              typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>>>
    FunctionRef(F&& f)  // NOLINT: implicit on purpose, like std::function
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* obj, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(obj))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

  private:
    void* obj_;
    R (*call_)(void*, Args...);
};

}  // namespace llada
