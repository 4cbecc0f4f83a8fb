// tfwasm's PJRT shim (cargo feature `pjrt`, issue 45 stage 1): the
// registrations TensorFlow 2.21 needs before an eager XLA launch on the WASM
// StreamExecutor device can reach tfwasm's PJRT client, none of which a C
// entry point makes. Compiled by host/plugin/build.rs against the headers of
// the TensorFlow wheel it is built for; C++ symbols resolve at load time from
// libtensorflow_cc.so.2 / libtensorflow_framework.so.2.
//
// Why each step is needed is measured in docs/xla-pjrt-notes.md (section 5):
//   1. an XLA compilation device for the type (XLA_CPU_JIT's op set);
//   2. the type allow-listed for PJRT in XlaLaunch (else TF builds a classic
//      StreamExecutor XLA client and fails on a null platform id);
//   3. the SE device factory re-registered through a wrapper whose layout
//      puts the JIT backend's name where 2.21's
//      XlaOpRegistry::GetCompilationDevice reads a NextPluggableDeviceFactory's
//      (it reads every pluggable type with a PJRT client as one);
//   4. in the wrapper's CreateDevices, use_pjrt_tensor_buffer and
//      pjrt_context set on each device's AcceleratorDeviceInfo (else the
//      launch takes the TPU AsyncValueTensor path and dereferences null);
//   5. last, the PJRT C API client created and set for the type: a client
//      without 3 aborts TensorFlow at its first function.
// 3 and 4 rely on one TensorFlow build's private layout, so the plugin calls
// the shim only on the exact TensorFlow version its headers came from
// (abi/shim.rs); on any other nothing is installed and eager jit keeps
// TensorFlow's own error.
//
// The PJRT client headers need MLIR's, which the wheel does not ship: the two
// functions used from them are declared here, as the wheel exports them.

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorflow/compiler/jit/flags.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/common_runtime/device.h"
#include "tensorflow/core/common_runtime/device_factory.h"
#include "tensorflow/core/common_runtime/pluggable_device/pluggable_device_factory.h"
#include "xla/pjrt/pjrt_common.h"
#include "xla/tsl/framework/device_type.h"

namespace xla {
// Only ever moved and, on an error path, deleted through its vtable.
class PjRtClient {
 public:
  virtual ~PjRtClient();
};
class KeyValueStoreInterface;
// xla/pjrt/c_api_client/pjrt_c_api_client.h
absl::StatusOr<std::unique_ptr<PjRtClient>> GetCApiClient(
    absl::string_view device_type, const absl::flat_hash_map<std::string, PjRtValueType>& create_options,
    std::shared_ptr<KeyValueStoreInterface> kv_store);
}  // namespace xla

namespace tensorflow {
// tensorflow/core/tfrt/common/pjrt_util.h
absl::Status SetPjRtClientInTFGlobalResourceManager(const tsl::DeviceType& device_type,
                                                    std::unique_ptr<xla::PjRtClient> client);
}  // namespace tensorflow

namespace {

// Set once the client exists: only then do created devices switch to PJRT
// tensor buffers (a device so marked without a client fails its launches).
bool g_client_set = false;

// The SE PluggableDeviceFactory of the type, behind a layout TensorFlow
// 2.21 reads as a NextPluggableDeviceFactory's: vtable, a pointer, the
// device type, then the compilation device name at offset 0x30.
class WasmDeviceFactory : public tensorflow::DeviceFactory {
 public:
  WasmDeviceFactory(const std::string& device_type, const std::string& jit_device,
                    std::unique_ptr<tensorflow::DeviceFactory> inner)
      : unused_(nullptr), device_type_(device_type), compilation_device_name_(jit_device),
        inner_(std::move(inner)) {}

  absl::Status ListPhysicalDevices(std::vector<std::string>* devices) override {
    return inner_->ListPhysicalDevices(devices);
  }

  absl::Status CreateDevices(const tensorflow::SessionOptions& options, const std::string& name_prefix,
                             std::vector<std::unique_ptr<tensorflow::Device>>* devices) override {
    size_t before = devices->size();
    absl::Status status = inner_->CreateDevices(options, name_prefix, devices);
    for (size_t i = before; status.ok() && g_client_set && i < devices->size(); i++) {
      // TensorFlow hands the info out as const; the launch path reads the
      // flag from it, and SE copies must keep going through the SE context.
      auto* info = const_cast<tensorflow::DeviceBase::AcceleratorDeviceInfo*>(
          (*devices)[i]->tensorflow_accelerator_device_info());
      if (info == nullptr) continue;
      info->use_pjrt_tensor_buffer = true;
      if (info->pjrt_context == nullptr) info->pjrt_context = info->default_context;
    }
    return status;
  }

  absl::Status GetDeviceDetails(int device_index,
                                std::unordered_map<std::string, std::string>* details) override {
    return inner_->GetDeviceDetails(device_index, details);
  }

  const void* unused_;
  std::string device_type_;
  std::string compilation_device_name_;
  std::unique_ptr<tensorflow::DeviceFactory> inner_;
};

void set_error(char* error, size_t error_size, const std::string& message) {
  if (error_size == 0) return;
  std::snprintf(error, error_size, "%s", message.c_str());
}

}  // namespace

// Installs steps 1-5 for `device_type`, whose SE platform is `platform_name`.
// Returns 0 when all are installed; 1 when nothing was installed (a layout
// that does not match), 2 when a step failed after others were installed.
// `error` gets the reason (one line).
extern "C" int tfwasm_pjrt_shim_install(const char* device_type, const char* platform_name,
                                        const char* jit_device, int factory_priority, char* error,
                                        size_t error_size) {
  try {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
    if (offsetof(WasmDeviceFactory, compilation_device_name_) != 0x30) {
#pragma GCC diagnostic pop
      set_error(error, error_size, "the device factory wrapper's layout does not match this TensorFlow's");
      return 1;
    }

    // 1. The XLA compilation device.
    tensorflow::XlaOpRegistry::DeviceRegistration registration;
    registration.compilation_device_name = jit_device;
    registration.autoclustering_policy =
        tensorflow::XlaOpRegistry::AutoclusteringPolicy::kIfExplicitlyRequested;
    tensorflow::XlaOpRegistry::RegisterCompilationDevice(device_type, registration);

    // 2. PJRT for XlaLaunch on this type.
    auto& device_api = tensorflow::GetXlaOpsCommonFlags()->tf_xla_use_device_api;
    device_api.enabled_for_xla_launch_ = true;
    device_api.AllowForDeviceInXlaLaunch(tensorflow::DeviceType(device_type));

    // 3. The SE factory behind the wrapper, replacing the loader's (220).
    auto inner = std::make_unique<tensorflow::PluggableDeviceFactory>(device_type, platform_name);
    tensorflow::DeviceFactory::Register(
        device_type, std::make_unique<WasmDeviceFactory>(device_type, jit_device, std::move(inner)),
        factory_priority, /*is_pluggable_device=*/true);

    // 5. The client, last (4 happens in CreateDevices once it exists).
    absl::StatusOr<std::unique_ptr<xla::PjRtClient>> client = xla::GetCApiClient(device_type, {}, nullptr);
    if (!client.ok()) {
      set_error(error, error_size, "creating the PJRT client: " + std::string(client.status().message()));
      return 2;
    }
    absl::Status status =
        tensorflow::SetPjRtClientInTFGlobalResourceManager(tensorflow::DeviceType(device_type), std::move(*client));
    if (!status.ok()) {
      set_error(error, error_size, "setting the PJRT client: " + std::string(status.message()));
      return 2;
    }
    g_client_set = true;
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_size, std::string("exception: ") + e.what());
    return 2;
  } catch (...) {
    set_error(error, error_size, "unknown exception");
    return 2;
  }
}
