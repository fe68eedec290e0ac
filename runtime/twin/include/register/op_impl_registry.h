// Host side of the CPU twin: the gert/ge surface the emitted tiling function uses, with one
// TilingContext the launcher fills from the launch's input shapes and dtypes, the call's
// attributes and the target.
#ifndef TWIN_REGISTER_OP_IMPL_REGISTRY_H
#define TWIN_REGISTER_OP_IMPL_REGISTRY_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ge {
using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFF;
// the values of graph/types.h for the dtypes the twin runs
enum DataType { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_BF16 = 27, DT_UNDEFINED = 28 };
}  // namespace ge

namespace fe {
struct PlatFormInfos {
    uint32_t coreNumAiv;
    uint64_t ubBytes;
};
}  // namespace fe

namespace gert {

constexpr size_t TWIN_MAX_RANK = 8;
constexpr size_t TWIN_MAX_INPUTS = 16;
constexpr size_t TWIN_MAX_ATTRS = 16;
constexpr size_t TWIN_MAX_STR = 64;
constexpr size_t TWIN_TILING_CAPACITY = 4096;

class CompileTimeTensorDesc {
public:
    ge::DataType GetDataType() const { return dtype_; }
    ge::DataType dtype_ = ge::DT_UNDEFINED;
};

// Attributes by index, as the OpDef declares them: float, string (char) or bool.
class RuntimeAttrs {
public:
    template <typename T>
    const T* GetAttrPointer(size_t index) const;
    const float* GetFloat(size_t index) const;
    const char* GetStr(size_t index) const;
    size_t GetAttrNum() const { return n_; }

    enum Kind : uint8_t { FLOAT = 0, STRING = 1, BOOL = 2 };
    size_t n_ = 0;
    Kind kinds_[TWIN_MAX_ATTRS] = {};
    float floats_[TWIN_MAX_ATTRS] = {};
    bool bools_[TWIN_MAX_ATTRS] = {};
    char strs_[TWIN_MAX_ATTRS][TWIN_MAX_STR] = {};
};

template <>
inline const float* RuntimeAttrs::GetAttrPointer<float>(size_t index) const
{
    return index < n_ && kinds_[index] == FLOAT ? &floats_[index] : nullptr;
}

template <>
inline const char* RuntimeAttrs::GetAttrPointer<char>(size_t index) const
{
    return index < n_ && kinds_[index] == STRING ? strs_[index] : nullptr;
}

template <>
inline const bool* RuntimeAttrs::GetAttrPointer<bool>(size_t index) const
{
    return index < n_ && kinds_[index] == BOOL ? &bools_[index] : nullptr;
}

inline const float* RuntimeAttrs::GetFloat(size_t index) const { return GetAttrPointer<float>(index); }
inline const char* RuntimeAttrs::GetStr(size_t index) const { return GetAttrPointer<char>(index); }

class Shape {
public:
    size_t GetDimNum() const { return rank_; }
    int64_t GetDim(size_t i) const { return i < rank_ ? dims_[i] : 0; }
    int64_t GetShapeSize() const
    {
        int64_t n = 1;
        for (size_t i = 0; i < rank_; ++i) {
            n *= dims_[i];
        }
        return n;
    }
    size_t rank_ = 0;
    int64_t dims_[TWIN_MAX_RANK] = {};
};

class StorageShape {
public:
    const Shape& GetStorageShape() const { return shape_; }
    const Shape& GetOriginShape() const { return shape_; }
    Shape shape_;
};

class TilingContext {
public:
    const StorageShape* GetInputShape(size_t index) const { return index < nInputs_ ? &inputs_[index] : nullptr; }
    const CompileTimeTensorDesc* GetInputDesc(size_t index) const
    {
        return index < nInputs_ ? &descs_[index] : nullptr;
    }
    const RuntimeAttrs* GetAttrs() const { return &attrs_; }
    fe::PlatFormInfos* GetPlatformInfo() { return &platform_; }

    template <typename T>
    T* GetTilingData()
    {
        static_assert(sizeof(T) <= TWIN_TILING_CAPACITY, "tiling data larger than the twin's tiling buffer");
        tilingSize_ = sizeof(T);
        return reinterpret_cast<T*>(tiling_);
    }

    size_t* GetWorkspaceSizes(size_t num)
    {
        return num <= 1 ? &workspace_ : nullptr;
    }

    ge::graphStatus SetBlockDim(uint32_t blockDim)
    {
        blockDim_ = blockDim;
        return ge::GRAPH_SUCCESS;
    }

    ge::graphStatus SetTilingKey(uint64_t key)
    {
        tilingKey_ = key;
        keySet_ = true;
        return ge::GRAPH_SUCCESS;
    }

    StorageShape inputs_[TWIN_MAX_INPUTS];
    CompileTimeTensorDesc descs_[TWIN_MAX_INPUTS];
    RuntimeAttrs attrs_;
    size_t nInputs_ = 0;
    fe::PlatFormInfos platform_ = {};
    alignas(8) uint8_t tiling_[TWIN_TILING_CAPACITY] = {};
    size_t tilingSize_ = 0;
    size_t workspace_ = 0;
    uint32_t blockDim_ = 0;
    uint64_t tilingKey_ = 0;
    bool keySet_ = false;
};

class TilingParseContext {};
class InferShapeContext;
class InferDataTypeContext;

using TilingKernelFunc = ge::graphStatus (*)(TilingContext*);
using TilingParseFunc = ge::graphStatus (*)(TilingParseContext*);

// The op whose tiling this library holds (one op per twin library).
struct TwinTilingRegistry {
    const char* op = nullptr;
    TilingKernelFunc tiling = nullptr;
    TilingParseFunc parse = nullptr;
};

inline TwinTilingRegistry& TwinRegistry()
{
    static TwinTilingRegistry registry;
    return registry;
}

class OpImplRegisterV2 {
public:
    explicit OpImplRegisterV2(const char* op) : op_(op) {}

    OpImplRegisterV2& Tiling(TilingKernelFunc func)
    {
        TwinRegistry().op = op_;
        TwinRegistry().tiling = func;
        return *this;
    }

    template <typename CompileInfo>
    OpImplRegisterV2& TilingParse(TilingParseFunc func)
    {
        TwinRegistry().parse = func;
        return *this;
    }

private:
    const char* op_;
};

}  // namespace gert

#define TWIN_CONCAT_INNER(a, b) a##b
#define TWIN_CONCAT(a, b) TWIN_CONCAT_INNER(a, b)
#define IMPL_OP_OPTILING(op) \
    static ::gert::OpImplRegisterV2 TWIN_CONCAT(twinOpTiling_, __COUNTER__) = ::gert::OpImplRegisterV2(#op)

#endif  // TWIN_REGISTER_OP_IMPL_REGISTRY_H
